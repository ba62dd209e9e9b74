"""Full backward hooks (``register_full_backward_hook``): reading grad_output and editing grad_input, and why the
old ``register_backward_hook`` is deprecated."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from hookscope.core.engine.hooks import FULL_BACKWARD
from hookscope.core.engine.interventions import Intervention
from hookscope.core.pictures.views import shape_text
from hookscope.core.teaching.lessons.base import (
    ZERO_GRADIENT,
    AppSetup,
    Handles,
    Lesson,
    Outcome,
    Row,
    Setting,
    UseBuiltIn,
    close,
    cpu_copy,
    forward_backward,
    handle_names,
    max_diff,
    mean_abs,
    num,
    run_capture,
    script,
)
from hookscope.core.teaching.lessons.plan import Picks, is_leaf
from hookscope.core.teaching.snippets import edit_snippet, module_expression

# ---- full backward hook: read grad_output, edit grad_input -------------------------------------------------------
GRAD_INPUT_FACTOR = 1.6


def _backward_grad_input(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("grad_layer")
    module = s.model.get_submodule(path)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def read(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        seen.append((cpu_copy(grad_input[0]), cpu_copy(grad_output[0])))

    hooks.remember(module)
    registry = hooks.registry(s.model)
    # The edit is Hookscope's (prepend=True: it runs first); the reading hook after it sees the edited grad_input.
    registry.add_edit(Intervention("scale-grad-input", path, factor=GRAD_INPUT_FACTOR))
    hooks.backward_hook(module, read, full=True)
    with registry.edits_suspended():
        run_capture(s, registry)
    run_capture(s, registry)
    registry.clear()
    (in0, out0), (in1, out1) = seen[0], seen[-1]
    if not mean_abs(in0):
        raise UseBuiltIn(ZERO_GRADIENT.format(path=path))
    # Up to float rounding, not bitwise: PyTorch's backward on several CPU threads can add in another order from one
    # pass to the next (plain resnet18 at 32x32 on two threads: 8 passes of 20 differ in the last bits, none on one).
    out_diff = max_diff(out0, out1)
    out_same = close(out1, out0)
    in_scaled = close(in1, GRAD_INPUT_FACTOR * in0)
    ok = len(seen) == 2 and out_same and in_scaled and mean_abs(in0) > 0
    ratio = mean_abs(in1) / mean_abs(in0) if mean_abs(in0) else math.nan
    rows = [
        Row("grad_output: mean |·|", num(mean_abs(out0)), num(mean_abs(out1))),
        Row("grad_output unchanged", "", _unchanged_text(out_same, out_diff)),
        Row("grad_input: mean |·|", num(mean_abs(in0)), num(mean_abs(in1))),
        Row("grad_input: first value", num(in0.flatten()[0]), num(in1.flatten()[0])),
        Row("grad_input ratio", "", f"×{num(ratio)}"),
    ]
    return Outcome(
        ok,
        f"The full backward hook on {path} read grad_output and returned grad_input × {GRAD_INPUT_FACTOR}: "
        f"grad_output is unchanged, grad_input is ×{num(ratio)}.",
        f"{path} grad_output mean|.| {num(mean_abs(out0))} (unchanged: {'yes' if out_same else 'no'}), grad_input "
        f"{num(mean_abs(in0))} -> {num(mean_abs(in1))} (x{num(ratio)})",
        ("without the hook's edit", f"grad_input × {GRAD_INPUT_FACTOR}"),
        rows,
        {"layer": path},
        {"grad_input_before": in0, "grad_input_after": in1, "grad_output_before": out0, "grad_output_after": out1},
    )


def _unchanged_text(same: bool, diff: float) -> str:
    if not same:
        return f"no (max difference {num(diff)})"
    return "yes, exactly" if diff == 0 else f"yes, to float rounding (max difference {num(diff)})"


def _backward_grad_input_code(s: Setting) -> str:
    path = s.picks.path("grad_layer")
    m = module_expression(path)
    code = edit_snippet(Intervention("scale-grad-input", path, factor=GRAD_INPUT_FACTOR), 0)
    handles = ", ".join(handle_names(code))
    body = f"""seen = []


# A full backward hook gets (module, grad_input, grad_output) when the gradient reaches the module.
def read(module, grad_input, grad_output):
    seen.append((grad_input[0].detach().clone(), grad_output[0].detach().clone()))


h_read = {m}.register_full_backward_hook(read)
image_grad()

{code.strip()}

image_grad()  # the edit (prepend=True) runs first: read sees the edited grad_input
for handle in (h_read, {handles}):
    handle.remove()
(grad_in0, grad_out0), (grad_in1, grad_out1) = seen
# Up to float rounding: a backward pass on several CPU threads can add in another order from one pass to the next.
diff = (grad_out1 - grad_out0).abs().max().item()
print("grad_output unchanged:", diff <= 1e-5 * grad_out0.abs().max().item(), f"(max difference {{diff:.2g}})")
print("grad_input ratio:", (grad_in1.abs().mean() / grad_in0.abs().mean()).item())"""
    return script("a full backward hook reads grad_output and edits grad_input", s, body)


def _backward_setup(picks: Picks, _other: str) -> AppSetup:
    # The window's Grad column (a tensor hook: grad_output, unchanged) and Grad in column (a full backward hook after
    # the edit's: grad_input, scaled) show both sides of the lesson.
    return AppSetup(
        ((picks.path("grad_layer"), "tensor"), (picks.path("grad_layer"), "grad_input")),
        (Intervention("scale-grad-input", picks.path("grad_layer"), factor=GRAD_INPUT_FACTOR),),
    )


# ---- the deprecated register_backward_hook -------------------------------------------------------------------------
DEPRECATED = "register_backward_hook (deprecated)"  # how the window lists the old hook while the lesson runs


def _block_ending_in_a_module(s: Setting, hooks: Handles) -> str:
    """The first candidate container whose last operation is one of its modules (its output is that module's
    output), found in one pass without gradients; containers that already have backward hooks are skipped (PyTorch
    allows one kind per module)."""
    modules = dict(s.model.named_modules())
    candidates = [p for p in s.picks.blocks if not modules[p]._backward_hooks]
    last_leaf: list[object] = [None]
    found: list[str] = []

    def leaf_done(module: nn.Module, inputs: tuple, output: object) -> None:
        last_leaf[0] = output

    def block_done(path: str) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            if output is last_leaf[0]:
                found.append(path)

        return hook

    probes = [hooks.add(modules[p].register_forward_hook(block_done(p))) for p in candidates]
    inside = {name for p in candidates for name, m in modules[p].named_modules(prefix=p) if m is not modules[p]}
    probes += [hooks.add(modules[name].register_forward_hook(leaf_done)) for name in inside if is_leaf(modules[name])]
    try:
        with torch.no_grad():
            s.model(s.x)
    finally:
        for probe in probes:
            hooks.remove(probe)
    if not found:
        raise UseBuiltIn(
            "no container of this model ends in one of its own modules (their last operation is a "
            "function such as torch.cat or +), so the last operation's gradient cannot be shown by hand."
        )
    first = next(p for p in candidates if p in found)
    s.picks = replace(s.picks, blocks=(first,))
    return first


# long because: a lesson's probe hooks, run and comparison read as the one story the lesson tells
def _backward_deprecated(s: Setting, hooks: Handles) -> Outcome:
    path = _block_ending_in_a_module(s, hooks)
    block = s.model.get_submodule(path)
    leaves = {name: m for name, m in block.named_modules() if name and is_leaf(m)}
    pending: dict[str, list[torch.Tensor | None]] = {}
    calls: list[tuple[str, torch.Tensor | None, object]] = []  # (leaf, its input as it was, its output) in call order
    boundary: dict[str, Any] = {}
    got: dict[str, Any] = {}

    def leaf_in(name: str) -> Callable[[nn.Module, tuple], None]:
        def hook(module: nn.Module, inputs: tuple) -> None:
            pending.setdefault(name, []).append(inputs[0].detach().clone() if inputs else None)

        return hook

    def leaf_out(name: str) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            calls.append((name, pending[name].pop(), output))

        return hook

    def block_in(module: nn.Module, inputs: tuple) -> None:
        boundary["input"] = inputs[0].detach().clone()

    def block_out(module: nn.Module, inputs: tuple, output: object) -> None:
        boundary["output"] = output

    def old_hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        got["old"] = tuple(cpu_copy(g) if g is not None else None for g in grad_input)

    def full_hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        got["full"] = cpu_copy(grad_input[0])
        got["grad_output"] = grad_output[0].detach().clone()

    # One pass each: PyTorch refuses both kinds of backward hook on one module at the same time.
    probes = [hooks.add(block.register_forward_pre_hook(block_in)), hooks.add(block.register_forward_hook(block_out))]
    for name, leaf in leaves.items():
        probes.append(hooks.add(leaf.register_forward_pre_hook(leaf_in(name))))
        probes.append(hooks.add(leaf.register_forward_hook(leaf_out(name))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = hooks.backward_hook(block, old_hook, full=False)
        forward_backward(s)
    hooks.remove(old)
    for probe in probes:
        hooks.remove(probe)
    last = next(((name, x_in) for name, x_in, out in reversed(calls) if out is boundary["output"]), None)
    boundary.pop("output")
    calls.clear()
    full = hooks.backward_hook(block, full_hook, full=True)
    forward_backward(s)
    hooks.remove(full)

    # The same gradients by hand: the block on its input, and its last operation on that operation's input.
    grad_output = got["grad_output"]
    with torch.enable_grad():
        x_block = boundary["input"].clone().requires_grad_(True)
        by_hand_block = cpu_copy(torch.autograd.grad(block(x_block), x_block, grad_output)[0])
        by_hand_last = None
        if last is not None and last[1] is not None:
            x_last = last[1].clone().requires_grad_(True)
            # a clone goes in: an in-place module must not write into the leaf that takes the gradient
            by_hand_last = cpu_copy(torch.autograd.grad(leaves[last[0]](x_last.clone()), x_last, grad_output)[0])
    old_grads = [g for g in got["old"] if g is not None]
    full_grad = got["full"]
    if not mean_abs(full_grad):
        raise UseBuiltIn(ZERO_GRADIENT.format(path=f"{path}'s input"))
    old_match = by_hand_last is not None and any(close(g, by_hand_last) for g in old_grads)
    old_grad = next((g for g in old_grads if by_hand_last is not None and close(g, by_hand_last)), old_grads[0])
    full_match = close(full_grad, by_hand_block)
    differ = old_grad.shape != full_grad.shape or not close(old_grad, full_grad)
    ok = old_match and full_match and differ
    last_path = f"{path}.{last[0]}" if last is not None else "its last operation"
    warning = next((str(w.message) for w in caught if "non-full backward hook" in str(w.message)), "")
    rows = [
        Row("grad_input is the gradient of", f"{last_path}'s input (the last op)", f"{path}'s input"),
        Row("grad_input: shape", shape_text(old_grad.shape), shape_text(full_grad.shape)),
        Row("grad_input: mean |·|", num(mean_abs(old_grad)), num(mean_abs(full_grad))),
        Row(
            "max |difference| from that gradient by hand",
            num(max_diff(old_grad, by_hand_last)) if by_hand_last is not None else "n/a",
            num(max_diff(full_grad, by_hand_block)),
        ),
        Row("PyTorch's warning", warning.split(". ")[0] + "." if warning else "(none)", "(none)"),
    ]
    return Outcome(
        ok,
        f"On {path} the deprecated register_backward_hook reported the gradient of {last_path}'s input (mean |·| "
        f"{num(mean_abs(old_grad))}), not of {path}'s input, which register_full_backward_hook reported (mean |·| "
        f"{num(mean_abs(full_grad))}).",
        f"{path}: old hook grad_in mean|.| {num(mean_abs(old_grad))} = {last_path}'s input grad; full hook "
        f"{num(mean_abs(full_grad))} = {path}'s input grad",
        ("register_backward_hook (deprecated)", "register_full_backward_hook"),
        rows,
        {"block": path, "last_op": last_path},
        {
            "old": old_grad,
            "full": full_grad,
            "by_hand_block": by_hand_block,
            **({"by_hand_last": by_hand_last} if by_hand_last is not None else {}),
        },
        [warning] if warning else [],
    )


def _backward_deprecated_code(s: Setting) -> str:
    m = module_expression(s.picks.path("block"))
    body = f"""import warnings

block = {m}
got = {{}}


def old_hook(module, grad_input, grad_output):  # deprecated: grad_input of the block's LAST operation
    got["old"] = grad_input[0].detach().clone()


def full_hook(module, grad_input, grad_output):  # grad_input: the gradient of the block's own input
    got["full"] = grad_input[0].detach().clone()


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    handle = block.register_backward_hook(old_hook)
    image_grad()
handle.remove()
print("PyTorch warns:", caught[0].message if caught else "(nothing)")

# PyTorch refuses the other kind on a module that had one, even after remove(): reset its memory of it.
block._is_full_backward_hook = None
handle = block.register_full_backward_hook(full_hook)
image_grad()
handle.remove()
block._is_full_backward_hook = None

print("old  grad_input", tuple(got["old"].shape), "mean |.|", got["old"].abs().mean().item())
print("full grad_input", tuple(got["full"].shape), "mean |.|", got["full"].abs().mean().item())"""
    return script("register_backward_hook (deprecated) beside register_full_backward_hook", s, body)


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "backward-grad-input",
        "Full backward hook: read grad_output, edit grad_input",
        "backward",
        "register_full_backward_hook(fn) calls fn(module, grad_input, grad_output) when the gradient reaches the "
        "module: grad_output is the gradient of its output, grad_input that of its input. Returning a tuple replaces "
        "grad_input (here × 1.6) and leaves grad_output as it was; it is the only hook that gives grad_input (the "
        "window's Grad in column). Pitfall: it raises when an in-place op follows the module, and fires only where "
        "the graph needs it.",
        "grad_layer",
        _backward_grad_input,
        _backward_grad_input_code,
        _backward_setup,
        registers=(("backward", FULL_BACKWARD),),
    ),
    Lesson(
        "backward-deprecated",
        "Why register_backward_hook is deprecated",
        "backward",
        "The old register_backward_hook attaches to the autograd node of the module's output, so on a module made of "
        "several operations its grad_input is the gradient of the last operation's input, not of the module's input. "
        "register_full_backward_hook gives the module's own. Shown side by side, one pass each: PyTorch refuses both "
        "kinds on one module.",
        "block",
        _backward_deprecated,
        _backward_deprecated_code,
        registers=(("backward", DEPRECATED), ("backward", FULL_BACKWARD)),
    ),
)
