"""Tensor hooks (``Tensor.register_hook``): a gradient scaled on the tiny network (2 x 1.6 = 3.2), and the mean
gradient at the image scaled through the model's last module."""

from __future__ import annotations

import math

from hookscope.core.engine.hooks import TENSOR
from hookscope.core.engine.interventions import Intervention
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
    handle_names,
    input_grad,
    mean_abs,
    num,
    record_of,
    run_capture,
    script,
)
from hookscope.core.teaching.lessons.networks import TINY_INPUT, TINY_WEIGHT
from hookscope.core.teaching.lessons.plan import Picks
from hookscope.core.teaching.snippets import edit_snippet

# ---- tensor hook: the gradient x 1.6 on the tiny network ----------------------------------------------------------
TENSOR_FACTOR = 1.6


def _tensor_scale(s: Setting, hooks: Handles) -> Outcome:
    registry = hooks.registry(s.model)
    registry.add_edit(Intervention("scale-grad", "times2", factor=TENSOR_FACTOR))
    with registry.edits_suspended():
        before = input_grad(run_capture(s, registry))
    after = input_grad(run_capture(s, registry))
    registry.clear()
    b, a = float(before.flatten()[0]), float(after.flatten()[0])
    ok = b == TINY_WEIGHT and math.isclose(a, TINY_WEIGHT * TENSOR_FACTOR, rel_tol=1e-6)
    rows = [
        Row("y = 2 x at x = 1: dy/dx", num(b), num(a)),
        Row("the hook's factor", "", f"×{TENSOR_FACTOR}"),
    ]
    return Outcome(
        ok,
        f"The tensor hook on y's gradient returned it × {TENSOR_FACTOR}: x.grad went from {num(b)} to {num(a)} "
        f"({num(b)} × {TENSOR_FACTOR} = {num(TINY_WEIGHT * TENSOR_FACTOR)}).",
        f"x.grad {num(b)} -> {num(a)} (x{TENSOR_FACTOR})",
        ("without the hook", f"gradient × {TENSOR_FACTOR}"),
        rows,
        {"module": "times2"},
        {"before": before, "after": after},
    )


def _tensor_scale_code(s: Setting) -> str:
    code = edit_snippet(Intervention("scale-grad", "times2", factor=TENSOR_FACTOR), 0)
    handles = ", ".join(handle_names(code))
    body = f"""def grad_of_x():
    x = torch.tensor([[{TINY_INPUT}]], requires_grad=True)
    model(x).sum().backward()
    return x.grad.item()


before = grad_of_x()  # 2.0

{code.strip()}

after = grad_of_x()  # 2.0 x {TENSOR_FACTOR} = 3.2
for handle in ({handles},):
    handle.remove()
print("x.grad without the hook:", before, "with it:", round(after, 6))"""
    return script(f"a tensor hook multiplies a gradient by {TENSOR_FACTOR}", s, body, tiny=True)


# ---- tensor hook: the mean gradient x 50 on the model --------------------------------------------------------------
MEAN_FACTOR = 50.0


def _tensor_mean(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("head")
    registry = hooks.registry(s.model)
    registry.add(path, "tensor")
    registry.add_edit(Intervention("scale-grad", path, factor=MEAN_FACTOR))
    with registry.edits_suspended():
        before = run_capture(s, registry)
    after = run_capture(s, registry)
    registry.clear()
    g0, g1 = input_grad(before), input_grad(after)
    if not mean_abs(g0):
        raise UseBuiltIn(ZERO_GRADIENT.format(path="the image"))
    h0, h1 = record_of(before, path, "tensor"), record_of(after, path, "tensor")
    m0, m1 = mean_abs(g0), mean_abs(g1)
    ratio = m1 / m0 if m0 else math.nan
    ok = m0 > 0 and close(g1, MEAN_FACTOR * g0, rtol=1e-4) and close(h1, MEAN_FACTOR * h0, rtol=1e-5)
    rows = [
        Row(f"gradient of {path}'s output: mean |·|", num(mean_abs(h0)), num(mean_abs(h1))),
        Row("gradient at the image: mean |·|", num(m0), num(m1)),
        Row("gradient at the image: first value", num(g0.flatten()[0]), num(g1.flatten()[0])),
        Row("ratio", "", f"×{num(ratio)}"),
    ]
    return Outcome(
        ok,
        f"The tensor hook on {path}'s output returned its gradient × {num(MEAN_FACTOR)}; every gradient behind it "
        f"scaled the same: the mean |gradient| at the image went from {num(m0)} to {num(m1)} (×{num(ratio)}).",
        f"image grad mean|.| {num(m0)} -> {num(m1)} (x{num(ratio)}) via a tensor hook on {path}",
        ("without the hook", f"gradient × {num(MEAN_FACTOR)}"),
        rows,
        {"head": path},
        {"image_grad_before": g0, "image_grad_after": g1, "head_grad_before": h0, "head_grad_after": h1},
    )


def _tensor_mean_code(s: Setting) -> str:
    code = edit_snippet(Intervention("scale-grad", s.picks.path("head"), factor=MEAN_FACTOR), 0)
    handles = ", ".join(handle_names(code))
    body = f"""before = image_grad()

{code.strip()}

after = image_grad()
for handle in ({handles},):
    handle.remove()
print("mean |gradient| at the image:", before.abs().mean().item(), "->", after.abs().mean().item())
print("ratio:", (after.abs().mean() / before.abs().mean()).item())"""
    return script(f"a tensor hook multiplies the mean gradient by {num(MEAN_FACTOR)}", s, body)


def _tensor_mean_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(
        ((picks.path("head"), "tensor"),), (Intervention("scale-grad", picks.path("head"), factor=MEAN_FACTOR),)
    )


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "tensor-scale",
        "Tensor hook: a gradient × 1.6 (2 × 1.6 = 3.2)",
        "tensor",
        "Tensor.register_hook(fn) calls fn(grad) with the gradient of that tensor; returning a tensor replaces the "
        "gradient for everything before it. On y = 2 x the gradient at x is 2; a hook on y that returns grad × 1.6 "
        "makes it 3.2. Pitfall: only tensors that require grad take hooks, and grad mode is per thread.",
        "tiny",
        _tensor_scale,
        _tensor_scale_code,
    ),
    Lesson(
        "tensor-mean",
        "Tensor hook: the mean gradient × 50",
        "tensor",
        "A tensor hook on the output of the model's last module (registered from a forward hook, as Hookscope does) "
        "returns its gradient × 50. Backpropagation is linear, so every gradient behind it, down to the image, is "
        "50 times larger: the mean gradient too. Pitfall: the hook must be registered during the forward pass, on "
        "the tensor that takes part in the graph.",
        "head",
        _tensor_mean,
        _tensor_mean_code,
        _tensor_mean_setup,
        registers=(("tensor", TENSOR),),
    ),
)
