"""Forward pre-hooks (``register_forward_pre_hook``): returning a tuple replaces a module's inputs."""

from __future__ import annotations

import math

import torch

from hookscope.core.engine.hooks import FORWARD, PRE
from hookscope.core.engine.interventions import Intervention
from hookscope.core.teaching.lessons.base import (
    AppSetup,
    Handles,
    Lesson,
    Outcome,
    Row,
    Setting,
    handle_names,
    num,
    record_of,
    run_capture,
    script,
)
from hookscope.core.teaching.lessons.plan import Picks
from hookscope.core.teaching.snippets import edit_snippet, module_expression


# ---- forward pre-hook: double the input ----------------------------------------------------------------------------
def _pre_double(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("first")
    registry = hooks.registry(s.model)
    registry.add(path, "pre")
    registry.add(path, "forward")
    before = run_capture(s, registry)
    registry.add_edit(Intervention("scale-input", path, factor=2.0))
    after = run_capture(s, registry)
    registry.clear()
    in0, in1 = record_of(before, path, "pre"), record_of(after, path, "pre")
    out0, out1 = record_of(before, path, "forward"), record_of(after, path, "forward")
    ok = torch.equal(in1, 2 * in0) and not torch.equal(in1, in0)
    ratio = float(out1.abs().mean() / out0.abs().mean()) if float(out0.abs().mean()) else math.nan
    rows = [
        Row("input: mean", num(in0.mean()), num(in1.mean())),
        Row("input: first value", num(in0.flatten()[0]), num(in1.flatten()[0])),
        Row("input: max", num(in0.max()), num(in1.max())),
        Row("output: mean |·|", num(out0.abs().mean()), num(out1.abs().mean())),
        Row("after is twice before", "", "yes, exactly" if ok else "no"),
    ]
    return Outcome(
        ok,
        f"The pre-hook on {path} returned (2 × input,), and {path} received exactly twice its input "
        f"(its output changed by ×{num(ratio)}).",
        f"{path} input mean {num(in0.mean())} -> {num(in1.mean())} (x2 exactly: {'yes' if ok else 'no'})",
        ("input as given", "with the pre-hook"),
        rows,
        {"first": path},
        {"input_before": in0, "input_after": in1, "output_before": out0, "output_after": out1},
    )


def _pre_double_code(s: Setting) -> str:
    path = s.picks.path("first")
    m = module_expression(path)
    code = edit_snippet(Intervention("scale-input", path, factor=2.0), 0)
    handles = ", ".join(handle_names(code))
    body = f"""seen = []


# A reading pre-hook: gets (module, inputs) before the module runs.
def keep_input(module, inputs):
    seen.append(inputs[0].detach().clone())


h_keep = {m}.register_forward_pre_hook(keep_input)
with torch.no_grad():
    model(x)

{code.strip()}

with torch.no_grad():
    model(x)  # the edit (prepend=True) runs before keep_input, which sees the doubled input
for handle in (h_keep, {handles}):
    handle.remove()
before, after = seen
print("input mean", before.mean().item(), "->", after.mean().item(), "twice:", torch.equal(after, 2 * before))"""
    return script("a forward pre-hook doubles a module's input", s, body)


def _pre_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.path("first"), "pre"),), (Intervention("scale-input", picks.path("first"), factor=2.0),))


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "pre-double",
        "Forward pre-hook: double a module's input",
        "pre",
        "register_forward_pre_hook(fn) calls fn(module, inputs) before the module runs; inputs is a tuple. Returning "
        "a tuple replaces the inputs: here (2 × input,), so the module receives exactly twice what it was given. "
        "Pitfall: return a tuple, and keyword arguments are only seen with with_kwargs=True.",
        "first",
        _pre_double,
        _pre_double_code,
        _pre_setup,
        registers=(("pre", PRE), ("forward", FORWARD)),
    ),
)
