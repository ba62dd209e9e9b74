"""Interventions: hooks that change what flows through the network instead of only reading it.

A forward hook that returns a value replaces the module's output; a forward pre-hook that returns a tuple
replaces its inputs; a tensor hook that returns a tensor replaces the gradient; a full backward hook that returns
a tuple replaces ``grad_input``. Each ``Intervention`` is one such edit, written on the command line as
``KIND:PATH:...`` (``zero:layer4.1.conv2:3,5``); ``HookRegistry.add_edit`` registers it on the live model.

This module holds the edits themselves and the hook functions that apply them; registering and removing the
handles stays in ``hookscope.core.engine.hooks``.

An edit runs before the capture hooks of its module (``prepend=True``), so a capture of the same kind of hook sees
the edited value: the Grad column's tensor hook on the output gets a ``scale-grad``'s scaled gradient (its tensor
hook is registered first), and the Grad in column's full backward hook gets a ``scale-grad-input``'s scaled
grad_input. A ``backward`` capture (``--hooks backward``: a full backward hook reading grad_output) is read where
the gradient enters the module's boundary, before a ``scale-grad``'s tensor hook on the output acts, so it shows
the unedited gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hookscope.core.common.errors import HookscopeError, ImageError, RunError
from hookscope.core.engine.structure import tensor_leaves

EDIT_KINDS = ("zero", "keep", "scale", "scale-input", "scale-grad", "scale-grad-input", "mix")

# How each kind is written, for help texts and error messages.
EDIT_USAGE = {
    "zero": "zero:PATH:3,5",
    "keep": "keep:PATH:7",
    "scale": "scale:PATH:0.5 (or scale:PATH:0.5:3,5 for some channels)",
    "scale-input": "scale-input:PATH:2",
    "scale-grad": "scale-grad:PATH:1.6",
    "scale-grad-input": "scale-grad-input:PATH:1.6",
    "mix": "mix:PATH:0.7:OTHER_IMAGE",
}

# Which hook carries each kind (the registry's HookKind names).
EDIT_HOOK_KIND = {
    "zero": "forward",
    "keep": "forward",
    "scale": "forward",
    "mix": "forward",
    "scale-input": "pre",
    "scale-grad": "tensor",
    "scale-grad-input": "backward",
}

CHANNEL_KINDS = ("zero", "keep")


def _number(value: float) -> str:
    """``2`` for 2.0, ``0.5`` for 0.5: short, and ``float()`` reads it back exactly."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def _channels_text(channels: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in channels)


@dataclass(frozen=True)
class Intervention:
    """One edit of what flows through a module.

    ``factor`` is the scale for the ``scale*`` kinds and lambda for ``mix`` (``lam * a + (1 - lam) * b``, where
    ``b`` is the module's output on ``other_image``). ``channels`` index dimension 1 of an (N, C, ...) output.
    """

    kind: str
    path: str
    channels: tuple[int, ...] = ()
    factor: float = 1.0
    other_image: str | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.kind not in EDIT_KINDS:
            raise HookscopeError(f"Unknown edit kind '{self.kind}'; use one of: {', '.join(EDIT_KINDS)}.")
        if not self.path:
            raise HookscopeError(f"An edit needs a module path: {EDIT_USAGE[self.kind]}")
        try:
            channels = tuple(sorted({int(c) for c in self.channels}))
        except (TypeError, ValueError):
            raise HookscopeError(f"Channels are whole numbers, not {self.channels!r}.") from None
        if any(c < 0 for c in channels):
            raise HookscopeError(f"Channels are numbered from 0; got {_channels_text(channels)}.")
        object.__setattr__(self, "channels", channels)
        object.__setattr__(self, "factor", float(self.factor))
        if self.kind in CHANNEL_KINDS and not channels:
            raise HookscopeError(f"A '{self.kind}' edit needs channels: {EDIT_USAGE[self.kind]}")
        if channels and self.kind not in (*CHANNEL_KINDS, "scale"):
            raise HookscopeError(f"A '{self.kind}' edit takes no channels: {EDIT_USAGE[self.kind]}")
        if not math.isfinite(self.factor):
            raise HookscopeError(f"The factor of an edit must be a finite number, not {self.factor}.")
        if self.kind == "mix":
            if not self.other_image:
                raise HookscopeError(f"A 'mix' edit needs the other image: {EDIT_USAGE['mix']}")
            if not 0.0 <= self.factor <= 1.0:
                raise HookscopeError(f"The mix weight must be between 0 and 1, not {_number(self.factor)}.")
        elif self.other_image is not None:
            raise HookscopeError(f"Only a 'mix' edit takes another image, not '{self.kind}'.")

    @property
    def spec(self) -> str:
        """The command-line form; ``parse_edit(edit.spec)`` gives the edit back (enabled)."""
        if self.kind in CHANNEL_KINDS:
            return f"{self.kind}:{self.path}:{_channels_text(self.channels)}"
        if self.kind == "mix":
            return f"mix:{self.path}:{_number(self.factor)}:{self.other_image}"
        text = f"{self.kind}:{self.path}:{_number(self.factor)}"
        if self.channels:
            text += f":{_channels_text(self.channels)}"
        return text

    @property
    def hook_kind(self) -> str:
        """The hook that carries it: "forward", "pre", "tensor" or "backward"."""
        return EDIT_HOOK_KIND[self.kind]

    def describe(self) -> str:
        """One sentence in words, for the Interventions panel."""
        which = _which_channels(self.channels)
        factor = _number(self.factor)
        if self.kind == "zero":
            return f"Switch off {which} of {self.path}'s output"
        if self.kind == "keep":
            return f"Keep only {which} of {self.path}'s output (switch off all others)"
        if self.kind == "scale":
            if self.channels:
                return f"Scale {which} of {self.path}'s output by {factor}"
            return f"Scale {self.path}'s output by {factor}"
        if self.kind == "scale-input":
            return f"Scale {self.path}'s input by {factor} (forward pre-hook)"
        if self.kind == "scale-grad":  # the Grad column (a tensor hook too, registered after it) sees it scaled
            return f"Scale the gradient of {self.path}'s output by {factor} (tensor hook)"
        if self.kind == "scale-grad-input":  # the Grad in column (a full backward hook after it) sees it scaled
            return f"Scale {self.path}'s grad_input by {factor} (full backward hook)"
        rest = _number(round(1.0 - self.factor, 12))
        return f"Blend {self.path}'s output with its output on {self.other_image}: {factor} × this + {rest} × other"


def _which_channels(channels: tuple[int, ...]) -> str:
    if len(channels) == 1:
        return f"channel {channels[0]}"
    return f"channels {', '.join(str(c) for c in channels)}"


def parse_edit(spec: str) -> Intervention:
    """``KIND:PATH:ARGS`` -> an ``Intervention``; a bad spec raises a one-line ``HookscopeError`` whose
    ``edit_spec`` is ``spec``."""
    try:
        return _parse_edit(spec)
    except HookscopeError as error:
        if error.edit_spec is None:
            error.edit_spec = spec
        raise


def _parse_edit(spec: str) -> Intervention:
    text = spec.strip()
    kind, _, rest = text.partition(":")
    if kind not in EDIT_KINDS:
        if not rest:
            raise HookscopeError(f"Edit '{spec}' is not KIND:PATH:...; kinds: {', '.join(EDIT_KINDS)}.")
        raise HookscopeError(f"Unknown edit kind '{kind}' in '{spec}'; use one of: {', '.join(EDIT_KINDS)}.")
    usage = EDIT_USAGE[kind]
    # Module paths never contain ':'; the other image of a mix may (C:\images\cat.png), so it is split last.
    parts = rest.split(":", 2) if kind == "mix" else rest.split(":")
    path = parts[0] if parts else ""
    if not path:
        raise HookscopeError(f"Edit '{spec}' needs a module path: {usage}")
    args = parts[1:]
    try:
        if kind in CHANNEL_KINDS:
            if not args or not args[0]:
                raise HookscopeError(f"Edit '{spec}' needs channels: {usage}")
            if len(args) > 1:
                raise HookscopeError(f"Edit '{spec}' has too many parts: {usage}")
            return Intervention(kind, path, channels=_parse_channels(spec, args[0], usage))
        if kind == "mix":
            if len(args) < 2 or not args[0] or not args[1]:
                raise HookscopeError(f"Edit '{spec}' needs a weight and an image: {usage}")
            return Intervention(kind, path, factor=_parse_factor(spec, args[0], usage), other_image=args[1])
        if not args or not args[0]:
            raise HookscopeError(f"Edit '{spec}' needs a factor: {usage}")
        if len(args) > (2 if kind == "scale" else 1):
            raise HookscopeError(f"Edit '{spec}' has too many parts: {usage}")
        channels = _parse_channels(spec, args[1], usage) if len(args) == 2 else ()
        return Intervention(kind, path, channels=channels, factor=_parse_factor(spec, args[0], usage))
    except HookscopeError as error:
        message = str(error)
        if f"'{spec}'" in message:
            raise
        raise HookscopeError(f"Edit '{spec}': {message[0].lower()}{message[1:]}") from None


def _parse_channels(spec: str, text: str, usage: str) -> tuple[int, ...]:
    channels = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise HookscopeError(
                f"Edit '{spec}' has a bad channel '{part}': channels are whole numbers >= 0, e.g. {usage}"
            )
        channels.append(int(part))
    return tuple(channels)


def _parse_factor(spec: str, text: str, usage: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise HookscopeError(f"Edit '{spec}' has a bad number '{text}': {usage}") from None
    if not math.isfinite(value):
        raise HookscopeError(f"Edit '{spec}' has a bad number '{text}': {usage}")
    return value


# ---- applying edits ----------------------------------------------------------------------------------------
def check_channels(edit: Intervention, channel_count: int) -> None:
    """A one-line error for a channel the module's output does not have."""
    missing = [c for c in edit.channels if c >= channel_count]
    if missing:
        which = "channel" if len(missing) == 1 else "channels"
        verb = "does" if len(missing) == 1 else "do"
        raise RunError(
            f"{edit.path} has {channel_count} channels; {which} {', '.join(map(str, missing))} {verb} not exist.",
            module_path=edit.path,
            edit_spec=edit.spec,
        )


def edit_output(edit: Intervention, output: torch.Tensor, other: torch.Tensor | None = None) -> torch.Tensor:
    """The edited output of a zero, keep, scale or mix edit: always a new tensor, never ``output`` changed in place.

    (A later in-place op, or autograd, may still need the module's own output tensor as it was.)
    """
    if edit.kind == "mix":
        if other is None:
            raise RunError(
                f"The edit {edit.spec} has no output of {edit.path} on {edit.other_image} to blend in.",
                module_path=edit.path,
                edit_spec=edit.spec,
            )
        if other.shape != output.shape:
            raise RunError(
                f"{edit.path} gives {tuple(other.shape)} on {edit.other_image} but {tuple(output.shape)} on this "
                "image; mix needs images of the same size.",
                module_path=edit.path,
                edit_spec=edit.spec,
            )
        lam = edit.factor
        return lam * output + (1 - lam) * other.to(output.device, output.dtype)
    if edit.kind == "scale" and not edit.channels:
        return output * edit.factor
    if output.ndim < 2:
        raise RunError(
            f"{edit.path}'s output has shape {tuple(output.shape)}: no channel dimension to edit.",
            module_path=edit.path,
            edit_spec=edit.spec,
        )
    check_channels(edit, output.shape[1])
    edited = output.clone()
    if edit.kind == "zero":
        edited[:, list(edit.channels)] = 0
    elif edit.kind == "keep":
        others = torch.ones(output.shape[1], dtype=torch.bool, device=output.device)
        others[list(edit.channels)] = False
        edited[:, others] = 0
    else:  # scale some channels
        index = list(edit.channels)
        edited[:, index] = edited[:, index] * edit.factor
    return edited


class EditState:
    """What the edit hooks read at run time; the registry owns one.

    ``suspended`` > 0 makes every edit pass values through unchanged (a run "without edits"); ``mix_outputs``
    holds, per (other image, module path), the module's output on the other image, one tensor per call.
    """

    def __init__(self) -> None:
        self.suspended = 0
        self.mix_outputs: dict[tuple[str, str], list[torch.Tensor]] | None = None
        self.mix_calls: dict[tuple[str, str], int] = {}


def _need_tensor(edit: Intervention, output: Any) -> torch.Tensor:
    if not isinstance(output, torch.Tensor):
        raise RunError(
            f"The edit {edit.spec} needs a tensor output, but {edit.path} returns a {type(output).__name__}.",
            module_path=edit.path,
            edit_spec=edit.spec,
        )
    return output


def forward_edit_hook(edit: Intervention, state: EditState) -> Callable[[nn.Module, tuple, Any], Any]:
    """``register_forward_hook`` function for zero, keep, scale and mix: returns the replacement output."""

    def hook(module: nn.Module, inputs: tuple, output: Any) -> Any:
        if state.suspended:
            return None
        output = _need_tensor(edit, output)
        other = None
        if edit.kind == "mix":
            if state.mix_outputs is None:  # no other image given (e.g. the survey pass): nothing to blend
                return None
            key = (edit.other_image or "", edit.path)
            outputs = state.mix_outputs.get(key) or []
            if not outputs:
                raise RunError(
                    f"{edit.path} did not run on {edit.other_image}, so {edit.spec} has nothing to blend.",
                    module_path=edit.path,
                    edit_spec=edit.spec,
                )
            call = state.mix_calls.get(key, 0)
            state.mix_calls[key] = call + 1
            other = outputs[call % len(outputs)]
        return edit_output(edit, output, other)

    return hook


def pre_edit_hook(edit: Intervention, state: EditState) -> Callable[[nn.Module, tuple], Any]:
    """``register_forward_pre_hook`` function for scale-input: returns the replacement inputs tuple."""

    def hook(module: nn.Module, inputs: tuple) -> tuple | None:
        if state.suspended:
            return None
        return tuple(x * edit.factor if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)

    return hook


def grad_edit_hook(edit: Intervention, state: EditState) -> Callable[[nn.Module, tuple, Any], None]:
    """``register_forward_hook`` function for scale-grad: puts a gradient-replacing tensor hook on the output."""

    def scale(grad: torch.Tensor) -> torch.Tensor:
        return grad * edit.factor

    def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
        if state.suspended or not torch.is_grad_enabled():
            return
        for _, tensor in tensor_leaves(output):
            if tensor.requires_grad:
                tensor.register_hook(scale)

    return hook


def backward_edit_hook(edit: Intervention, state: EditState) -> Callable[[nn.Module, tuple, tuple], Any]:
    """``register_full_backward_hook`` function for scale-grad-input: returns the replacement ``grad_input``."""

    def hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> tuple | None:
        if state.suspended:
            return None
        return tuple(g * edit.factor if g is not None else None for g in grad_input)

    return hook


def make_edit_hook(edit: Intervention, state: EditState) -> Callable[..., Any]:
    if edit.kind == "scale-input":
        return pre_edit_hook(edit, state)
    if edit.kind == "scale-grad":
        return grad_edit_hook(edit, state)
    if edit.kind == "scale-grad-input":
        return backward_edit_hook(edit, state)
    return forward_edit_hook(edit, state)


def other_images(edits: Iterable[Intervention], preprocess: Any) -> dict[str, torch.Tensor]:
    """The other images the enabled mix edits blend in, read and preprocessed once each: what
    ``capture_run(..., others=...)`` takes. An unreadable image raises ``ImageError`` with its name; its ``path``
    is the image and its ``edit_spec`` the mix edit that wanted it."""
    from hookscope.core.models.images import read_image  # images imports torchvision; only a mix edit needs it

    others: dict[str, torch.Tensor] = {}
    for edit in edits:
        if edit.kind != "mix" or not edit.enabled or not edit.other_image or edit.other_image in others:
            continue
        if preprocess is None:
            raise HookscopeError(
                f"The edit {edit.spec} needs the model's preprocessing to read its image.",
                module_path=edit.path,
                edit_spec=edit.spec,
            )
        try:
            others[edit.other_image] = preprocess.to_tensor(read_image(edit.other_image))
        except ImageError as error:
            error.edit_spec = edit.spec
            error.module_path = edit.path
            raise
    return others
