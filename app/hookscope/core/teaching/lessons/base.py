"""What every lesson shares: what it returns, how it runs (its hooks removed in one place) and its code's frame.

A :class:`Lesson` says in two or three sentences what its hook receives, what returning a value does and its
pitfall; :meth:`Lesson.run` registers real hooks on the model, runs it, and returns a :class:`LessonResult`. The
lessons themselves are in one module per hook family (``forward``, ``pre``, ``backward``, ``tensor``, and
``all_hooks`` for handles and the in-place pitfalls).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.core.common.errors import HookscopeError
from hookscope.core.common.vocabulary import HookKind
from hookscope.core.engine.capture import RunResult, _objective
from hookscope.core.engine.hooks import HookInfo, HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.engine.run import run_image
from hookscope.core.engine.tree import survey
from hookscope.core.teaching.lessons.networks import (
    SMALL_CODE,
    TINY_CODE,
    TINY_INPUT,
    small_image,
    small_network,
    tiny_network,
)
from hookscope.core.teaching.lessons.plan import MISSING, Picks, plan

OTHER = "B"  # the name the mix edit knows image B by


# ---- what a lesson returns ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One line of numbers: a label and the two values shown side by side (text, already formatted)."""

    label: str
    left: str
    right: str


@dataclass
class LessonResult:
    """What one run of a lesson showed, and whether it reproduced the lesson's claim."""

    lesson: str  # the lesson's id
    ok: bool
    claim: str  # what was checked, in words, with the numbers
    summary: str  # the numbers in one short line (the command line prints it)
    columns: tuple[str, str]  # the headings of Row.left and Row.right
    rows: list[Row]
    snippet: str  # plain PyTorch that does the same, runnable on its own
    paths: dict[str, str] = field(default_factory=dict)  # the modules used, by role
    note: str = ""  # e.g. why the built-in network was used
    warnings: list[str] = field(default_factory=list)  # what PyTorch warned about during the run
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # the raw values behind the rows, on the CPU
    handles_left: int = 0  # handles this lesson registered that are still on a module (must be 0)
    error: str = ""  # the error that stopped the lesson, if one did

    @property
    def status(self) -> str:
        return "ok" if self.ok else "failed"


@dataclass(frozen=True)
class AppSetup:
    """The lesson as Hookscope's own ticks and edits, for the window to register through its workspace."""

    ticks: tuple[tuple[str, str], ...] = ()
    edits: tuple[Intervention, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ticks or self.edits)


class UseBuiltIn(Exception):
    """The model cannot show the lesson (its gradients are all zero, no container ends in a module); the lesson
    runs on the small built-in network instead, with this message as its note."""


# Why a lesson on the gradient uses the built-in network instead (``UseBuiltIn``).
ZERO_GRADIENT = (
    "on this model the gradient at {path} is zero everywhere (an untrained head with zero weights passes no "
    "gradient back), so every number would be 0."
)


# ---- handles ---------------------------------------------------------------------------------------------------
class Handles:
    """Every hook a lesson registers by itself (and every registry it makes), removed in one place.

    PyTorch remembers which kind of backward hook a module had (``_is_full_backward_hook``) even after the handle is
    removed, and refuses the other kind from then on; the flag is put back as it was, so that a lesson leaves the
    model exactly as it found it.
    """

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []
        self._registries: list[HookRegistry] = []
        self._flags: dict[int, tuple[nn.Module, bool | None]] = {}
        self._inplace: list[tuple[nn.Module, bool]] = []

    def add(self, handle: RemovableHandle) -> RemovableHandle:
        self._handles.append(handle)
        return handle

    def remember(self, module: nn.Module) -> None:
        """Note the module's backward-hook kind before anything registers one there."""
        if id(module) not in self._flags:
            self._flags[id(module)] = (module, module._is_full_backward_hook)

    def registry(self, model: nn.Module) -> HookRegistry:
        registry = HookRegistry(model)
        self._registries.append(registry)
        return registry

    def backward_hook(self, module: nn.Module, hook: Callable[..., Any], *, full: bool) -> RemovableHandle:
        """``register_full_backward_hook`` (``full``) or the deprecated ``register_backward_hook``."""
        self.remember(module)
        if not module._backward_hooks:
            module._is_full_backward_hook = None  # the other kind was used and removed before: allowed again
        if full:
            return self.add(module.register_full_backward_hook(hook))
        return self.add(module.register_backward_hook(hook))

    def not_in_place(self, module: nn.Module) -> None:
        """Switch ``module.inplace`` off until the lesson ends."""
        switched: Any = module  # an attribute nn.Module's types take for a submodule or a tensor
        self._inplace.append((module, bool(switched.inplace)))
        switched.inplace = False

    def remove(self, handle: RemovableHandle) -> None:
        handle.remove()
        self._restore_flags()

    def remove_all(self) -> None:
        for handle in self._handles:
            handle.remove()
        for registry in self._registries:
            registry.clear()
        for module, inplace in reversed(self._inplace):
            switched: Any = module
            switched.inplace = inplace
        self._inplace.clear()
        self._restore_flags()

    def _restore_flags(self) -> None:
        for module, flag in self._flags.values():
            if not module._backward_hooks:
                module._is_full_backward_hook = flag

    def left(self) -> int:
        """Handles still on a module: 0 after ``remove_all``."""
        count = sum(1 for h in self._handles if (hooks := h.hooks_dict_ref()) is not None and h.id in hooks)
        return count + sum(r.handle_count() for r in self._registries)


# ---- running ---------------------------------------------------------------------------------------------------
@dataclass
class Setting:
    """What one lesson runs on."""

    model: nn.Module
    x: torch.Tensor  # (1, C, H, W) on the model's device
    device: str
    picks: Picks
    other: torch.Tensor | None  # image B for the mix, on the model's device
    model_code: str  # Python that defines ``model``
    note: str = ""
    other_text: str = "image B"


def built_in(note: str) -> Setting:
    """The small built-in network and its image, for a lesson the given model cannot show."""
    small = small_network()
    x = small_image()
    picks = plan(small, survey(small, x))
    return Setting(small, x, "cpu", picks, torch.flip(x, dims=[-1]), SMALL_CODE, note, other_text="A mirrored")


@dataclass
class Outcome:
    ok: bool
    claim: str
    summary: str
    columns: tuple[str, str]
    rows: list[Row]
    paths: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def device_of(model: nn.Module) -> str:
    parameter = next(model.parameters(), None)
    return str(parameter.device) if parameter is not None else "cpu"


def cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)


def num(value: float | torch.Tensor) -> str:
    """Four significant digits; 3.2000000476837 (2 x 1.6 in float32) reads 3.2."""
    if isinstance(value, torch.Tensor):
        value = float(value)
    return f"{value:.4g}"


def mean_abs(tensor: torch.Tensor) -> float:
    return float(tensor.abs().mean())


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max()) if a.numel() else 0.0


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    """Equal up to float rounding, relative to the size of the values."""
    if a.shape != b.shape:
        return False
    scale = float(b.abs().max()) if b.numel() else 0.0
    return max_diff(a, b) <= rtol * max(scale, 1e-12)


def record_of(result: RunResult, path: str, kind: str) -> torch.Tensor:
    for record in result.records:
        if record.path == path and record.kind == kind and record.call == 0 and record.leaf == "":
            return record.tensor
    raise HookscopeError(f"The run kept no {kind} record of {path}.", module_path=path)


def input_grad(result: RunResult) -> torch.Tensor:
    """The gradient at the image of a run (``run_image`` always takes one; an error says so if it did not)."""
    if result.input_grad is None:
        raise HookscopeError("The run kept no gradient at the image.")
    return result.input_grad


def run_capture(setting: Setting, registry: HookRegistry, x: torch.Tensor | None = None, **options: Any) -> RunResult:
    """Forward, the top-1 logit, backward to the image: Hookscope's own run (``run_image``, as every run)."""
    return run_image(setting.model, registry, setting.x if x is None else x, device=setting.device, **options)


def forward_backward(setting: Setting) -> tuple[object, int | None]:
    """A plain forward and backward pass (hooks fire, nothing is recorded): the output and the target class."""
    with torch.enable_grad():
        xin = setting.x.detach().clone().requires_grad_(True)
        output = setting.model(xin)
        score, index, _ = _objective(output, "top1")
        torch.autograd.grad(score, [xin])
    return output, index


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ---- snippets ------------------------------------------------------------------------------------------------------
SCORE_CODE = '''def score(output):
    """What Hookscope differentiates: the top-1 logit (the sum of the output when it is not class scores)."""
    if output.ndim == 2 and output.shape[0] == 1 and output.shape[1] > 1:
        return output[0, output[0].argmax()]
    return output.sum()


def image_grad():
    """Forward, score, backward: the gradient at the image."""
    xin = x.clone().requires_grad_(True)
    score(model(xin)).backward()
    return xin.grad'''


def script(title: str, setting: Setting, body: str, *, tiny: bool = False) -> str:
    """A whole runnable script: the model, an input standing in for the image, the lesson's hooks and prints."""
    parts = [f'"""Hookscope lesson: {title}.\n\nPlain PyTorch, runnable on its own."""', "", "import torch"]
    parts += ["", setting.model_code]
    if not tiny:
        shape = tuple(setting.x.shape)
        parts += [
            f"x = torch.randn({shape}, generator=torch.Generator().manual_seed(0))  # stands in for your image",
            "",
            "",
            SCORE_CODE,
        ]
    parts += ["", "", body.strip("\n"), ""]
    return "\n".join(parts)


def handle_names(snippet: str) -> list[str]:
    """The handle variables a snippets.py snippet assigns (``h_edit0_scale_grad_fc = ...``)."""
    return re.findall(r"^(h_\w+) = ", snippet, flags=re.MULTILINE)


# ---- a lesson ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lesson:
    """One lesson: its words, how it runs, what it sets up in the window and the code that does the same."""

    id: str
    title: str
    hook: str  # the hook it teaches: "forward", "pre", "backward", "tensor"; "all" for handles and pitfalls
    text: str  # two or three sentences: what the hook receives, what returning a value does, its pitfall
    needs: str  # "tiny", or the Picks field it runs on
    compute: Callable[[Setting, Handles], Outcome]
    code: Callable[[Setting], str]
    app: Callable[[Picks, str], AppSetup] | None = None
    # What its run registers by itself, per (hook kind, PyTorch method), on the module it needs (``own_hooks``).
    registers: tuple[tuple[HookKind, str], ...] = ()

    @property
    def tiny(self) -> bool:
        return self.needs == "tiny"

    def setup(self, picks: Picks, other_image: str = OTHER) -> AppSetup:
        """The ticks and edits that are this lesson in Hookscope's own terms (empty when it has none, or when the
        model has no module for it). ``other_image`` names image B for a mix edit."""
        if self.app is None or self.tiny or getattr(picks, self.needs) is None:
            return AppSetup()
        return self.app(picks, other_image)

    def own_hooks(self, picks: Picks) -> tuple[HookInfo, ...]:
        """The hooks the lesson's run registers on the model by itself (beyond :meth:`setup`), all removed when the
        run ends: for a window to list while the run lives. None for a tiny lesson, or where the model lacks the
        module (the built-in network is used then)."""
        path = getattr(picks, self.needs) if not self.tiny else None
        if path is None:
            return ()
        note = f"The lesson '{self.title}' registered it for its run; it is removed when the run ends."
        return tuple(HookInfo(path, kind, method, note) for kind, method in self.registers)

    def prepare(
        self,
        model: nn.Module | None,
        image: torch.Tensor | None,
        *,
        picks: Picks | None = None,
        other: torch.Tensor | None = None,
        model_code: str | None = None,
        other_text: str | None = None,
    ) -> Setting:
        """What the lesson will run on: the given model, or a built-in network where it needs one."""
        if self.tiny:
            return Setting(tiny_network(), torch.tensor([[TINY_INPUT]]), "cpu", Picks(), None, TINY_CODE)
        note = ""
        if model is not None and image is not None:
            device = device_of(model)
            x = image.detach().to(device)
            if picks is None:
                picks = plan(model, survey(model, x))
            if getattr(picks, self.needs) is not None:
                b = other.detach().to(device) if other is not None else torch.flip(x, dims=[-1])
                text = other_text or ("image B" if other is not None else "A mirrored")
                return Setting(
                    model, x, device, picks, b, model_code or "model = ...  # your model, in eval mode", other_text=text
                )
            note = f"Shown on a small built-in network: this model has {MISSING[self.needs]}."
        else:
            note = "Shown on a small built-in network: no model was given."
        return built_in(note)

    def snippet(self, model: nn.Module | None = None, image: torch.Tensor | None = None, **options: Any) -> str:
        """The plain PyTorch of this lesson on ``model`` (the built-in network without one)."""
        return self.code(self.prepare(model, image, **options))

    def run(
        self,
        model: nn.Module | None,
        image: torch.Tensor | None,
        *,
        picks: Picks | None = None,
        other: torch.Tensor | None = None,
        model_code: str | None = None,
        other_text: str | None = None,
    ) -> LessonResult:
        """Register the lesson's hooks, run, check the claim, remove every hook (also when something raises).

        ``image`` is the (1, C, H, W) input as the model takes it; ``other`` image B for the mix (default: the image
        mirrored); ``picks`` the modules to use (default: ``plan`` on a survey of the model); ``model_code`` the
        Python that builds the model, for the snippet. A tiny lesson ignores the model and the image.
        """
        setting = self.prepare(model, image, picks=picks, other=other, model_code=model_code, other_text=other_text)
        hooks = Handles()
        error = ""
        try:
            try:
                outcome = self.compute(setting, hooks)
            except UseBuiltIn as reason:
                hooks.remove_all()
                setting = built_in(f"Shown on a small built-in network: {reason}")
                outcome = self.compute(setting, hooks)
        except Exception as exc:  # noqa: BLE001  (a lesson that breaks is a failed lesson, reported in one line)
            error = f"{type(exc).__name__}: {first_line(exc)}"
            outcome = Outcome(False, f"The lesson stopped: {error}", f"error: {error}", ("", ""), [])
        finally:
            hooks.remove_all()
        left = hooks.left()
        ok = outcome.ok and not left
        claim = outcome.claim + (f" But {left} handle(s) were left on the model." if left else "")
        try:
            snippet = self.code(setting)
        except Exception as exc:  # noqa: BLE001
            snippet = f"# No code for this lesson: {first_line(exc)}\n"
        return LessonResult(
            lesson=self.id, ok=ok, claim=claim, summary=outcome.summary, columns=outcome.columns, rows=outcome.rows,
            snippet=snippet, paths=outcome.paths, note=setting.note, warnings=outcome.warnings,
            tensors=outcome.tensors, handles_left=left, error=error,
        )  # fmt: skip
