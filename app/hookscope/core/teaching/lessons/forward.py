"""Forward hooks (``register_forward_hook``): exporting a layer's input and output, and returning a value
(manifold mixup, 0.7 A + 0.3 B)."""

from __future__ import annotations

import torch
from torch import nn

from hookscope.core.engine.hooks import FORWARD
from hookscope.core.engine.interventions import Intervention
from hookscope.core.pictures.views import shape_text
from hookscope.core.teaching.lessons.base import (
    OTHER,
    AppSetup,
    Handles,
    Lesson,
    Outcome,
    Row,
    Setting,
    close,
    cpu_copy,
    handle_names,
    max_diff,
    num,
    record_of,
    run_capture,
    script,
)
from hookscope.core.teaching.lessons.plan import Picks
from hookscope.core.teaching.snippets import edit_snippet, module_expression

MIX_WEIGHT = 0.7  # manifold mixup: 0.7 A + 0.3 B


# ---- forward hook: export a layer's input and output ---------------------------------------------------------
def _forward_export(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("layer")
    module = s.model.get_submodule(path)
    exported: dict[str, torch.Tensor] = {}

    def export(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        exported["input"] = cpu_copy(inputs[0])  # off the GPU, a copy: nothing later can change it
        exported["output"] = cpu_copy(output)

    handle = hooks.add(module.register_forward_hook(export))
    with torch.no_grad():
        s.model(s.x)
    hooks.remove(handle)
    with torch.no_grad():  # the module alone, on what was exported: the same output
        again = cpu_copy(module(exported["input"].to(s.device)))
    x_in, out = exported["input"], exported["output"]
    diff = max_diff(again, out)
    ok = close(again, out) and x_in.device.type == "cpu" and out.device.type == "cpu"
    rows = [
        Row("shape", shape_text(x_in.shape), shape_text(out.shape)),
        Row("mean", num(x_in.mean()), num(out.mean())),
        Row("min / max", f"{num(x_in.min())} / {num(x_in.max())}", f"{num(out.min())} / {num(out.max())}"),
        Row("device", str(x_in.device), str(out.device)),
        Row(f"{path} on the exported input", "", f"max |difference| {num(diff)}"),
    ]
    return Outcome(
        ok,
        f"The forward hook exported {path}'s input and output to the CPU; {path} run on the exported input gives the "
        f"exported output (max difference {num(diff)}).",
        f"{path}: input {shape_text(x_in.shape)} mean {num(x_in.mean())}, output "
        f"{shape_text(out.shape)} mean {num(out.mean())}, re-run differs by {num(diff)}",
        (f"{path}'s input", f"{path}'s output"),
        rows,
        {"layer": path},
        {"input": x_in, "output": out, "again": again},
    )


def _forward_export_code(s: Setting) -> str:
    m = module_expression(s.picks.path("layer"))
    body = f"""exported = {{}}


# A forward hook gets (module, inputs, output) after the module ran; inputs is a tuple of the positional arguments.
def export(module, inputs, output):
    exported["input"] = inputs[0].detach().to("cpu", copy=True)  # off the GPU, and a copy
    exported["output"] = output.detach().to("cpu", copy=True)


handle = {m}.register_forward_hook(export)
with torch.no_grad():
    model(x)
handle.remove()

with torch.no_grad():
    again = {m}(exported["input"].to(x.device)).cpu()
print("input", tuple(exported["input"].shape), "mean", exported["input"].mean().item())
print("output", tuple(exported["output"].shape), "mean", exported["output"].mean().item())
print("the module on the exported input gives the exported output:", torch.allclose(again, exported["output"], atol=1e-5))"""
    return script("a forward hook exports a layer's input and output", s, body)


def _export_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.path("layer"), "pre"), (picks.path("layer"), "forward")))


# ---- forward hook that returns a value: manifold mixup -----------------------------------------------------------
def _forward_mixup(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("layer")
    registry = hooks.registry(s.model)
    registry.add(path, "forward")
    a = record_of(run_capture(s, registry), path, "forward")
    b = record_of(run_capture(s, registry, s.other), path, "forward")
    registry.add_edit(Intervention("mix", path, factor=MIX_WEIGHT, other_image=OTHER))
    mixed = record_of(run_capture(s, registry, others={OTHER: s.other}), path, "forward")
    registry.clear()
    expected = MIX_WEIGHT * a + (1 - MIX_WEIGHT) * b
    diff = max_diff(mixed, expected)
    ok = close(mixed, expected) and not close(mixed, a)
    rows = [
        Row("A alone: mean", num(a.mean()), ""),
        Row(f"B ({s.other_text}) alone: mean", num(b.mean()), ""),
        Row("mean", num(expected.mean()), num(mixed.mean())),
        Row("first value", num(expected.flatten()[0]), num(mixed.flatten()[0])),
        Row("max |difference|", "", num(diff)),
    ]
    return Outcome(
        ok,
        f"The forward hook on {path} returned 0.7 A + 0.3 B, and the network went on with it: the output the next "
        f"hook saw equals 0.7 A + 0.3 B computed by hand (max difference {num(diff)}).",
        f"{path}: mean A {num(a.mean())}, B {num(b.mean())}, 0.7A+0.3B {num(expected.mean())}, hook "
        f"{num(mixed.mean())}, max diff {num(diff)}",
        ("0.7 A + 0.3 B by hand", "what the hook returned"),
        rows,
        {"layer": path},
        {"a": a, "b": b, "mixed": mixed},
    )


def _forward_mixup_code(s: Setting) -> str:
    path = s.picks.path("layer")
    m = module_expression(path)
    edit = Intervention("mix", path, factor=MIX_WEIGHT, other_image=OTHER)
    code = edit_snippet(edit, 0)
    handles = ", ".join(f"{h}" for h in handle_names(code))
    body = f'''x_b = torch.flip(x, dims=[-1])  # image B (here: A mirrored)
others = {{"{OTHER}": x_b}}

# A and B alone, before any hook changes anything:
alone = []
h_alone = {m}.register_forward_hook(lambda module, inputs, output: alone.append(output.detach().clone()))
with torch.no_grad():
    model(x)
    model(x_b)
h_alone.remove()
a, b = alone

{code.strip()}

# A hook registered after the edit sees what the edit returned.
seen = []
h_seen = {m}.register_forward_hook(lambda module, inputs, output: seen.append(output.detach().clone()))
with torch.no_grad():
    model(x)
for handle in (h_seen, {handles}):
    handle.remove()

expected = {MIX_WEIGHT} * a + (1 - {MIX_WEIGHT}) * b
print("0.7 A + 0.3 B mean", expected.mean().item(), "hook's output mean", seen[0].mean().item())
print("max difference", (seen[0] - expected).abs().max().item())'''
    return script("a forward hook returns 0.7 A + 0.3 B (manifold mixup)", s, body)


def _mix_setup(picks: Picks, other_image: str) -> AppSetup:
    return AppSetup(
        ((picks.path("layer"), "forward"),),
        (Intervention("mix", picks.path("layer"), factor=MIX_WEIGHT, other_image=other_image),),
    )


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "forward-export",
        "Forward hook: export a layer's input and output",
        "forward",
        "register_forward_hook(fn) calls fn(module, inputs, output) after the module ran: inputs is the tuple of its "
        "positional arguments, output what it returned. Returning None leaves the output alone, so a hook that only "
        "copies inputs[0] and output to the CPU exports them. Pitfall: keep a copy (detach().to('cpu', copy=True)); "
        "a later in-place op overwrites a kept reference.",
        "layer",
        _forward_export,
        _forward_export_code,
        _export_setup,
        registers=(("forward", FORWARD),),
    ),
    Lesson(
        "forward-mixup",
        "Forward hook that returns a value: manifold mixup, 0.7 A + 0.3 B",
        "forward",
        "A forward hook that returns a value replaces the module's output: the rest of the network, and every hook "
        "after it, gets the returned tensor. Here it returns 0.7 × the output on image A + 0.3 × the output on "
        "image B, as manifold mixup does. Pitfall: return a new tensor; editing output in place changes a tensor "
        "that autograd (or an in-place op later) still needs.",
        "layer",
        _forward_mixup,
        _forward_mixup_code,
        _mix_setup,
        registers=(("forward", FORWARD),),
    ),
)
