"""What holds for every hook: ``handle.remove()`` takes it off, and the pitfalls of in-place ops after a hook."""

from __future__ import annotations

import torch
from torch import nn

from hookscope.core.engine.capture import _objective
from hookscope.core.engine.hooks import FORWARD, FULL_BACKWARD, TENSOR, HookInfo
from hookscope.core.teaching.lessons.base import (
    AppSetup,
    Handles,
    Lesson,
    Outcome,
    Row,
    Setting,
    close,
    cpu_copy,
    first_line,
    forward_backward,
    handle_names,
    max_diff,
    num,
    record_of,
    run_capture,
    script,
)
from hookscope.core.teaching.lessons.plan import Picks
from hookscope.core.teaching.snippets import captured_key, hook_snippet, module_expression


# ---- handle.remove() ---------------------------------------------------------------------------------------------------
def _handle_remove(s: Setting, hooks: Handles) -> Outcome:
    path = s.picks.path("layer")
    module = s.model.get_submodule(path)
    count = [0]

    def counter(module: nn.Module, inputs: tuple, output: object) -> None:
        count[0] += 1

    n0 = len(module._forward_hooks)
    handle = hooks.add(module.register_forward_hook(counter))
    n1 = len(module._forward_hooks)
    with torch.no_grad():
        s.model(s.x)
    c1 = count[0]
    handle.remove()
    n2 = len(module._forward_hooks)
    with torch.no_grad():
        s.model(s.x)
    c2 = count[0]
    ok = n1 == n0 + 1 and n2 == n0 and c1 == 1 and c2 == 1
    rows = [
        Row(f"forward hooks on {path}", str(n1), str(n2)),
        Row("calls the hook counted, after one more forward pass", str(c1), str(c2)),
    ]
    return Outcome(
        ok,
        f"register_forward_hook added one hook to {path} ({n0} -> {n1}) and it counted one call; after "
        f"handle.remove() {path} had {n2} again and the next forward pass left the count at {c2}.",
        f"{path}: hooks {n0} -> {n1} -> {n2} after remove; calls counted {c1}, then still {c2}",
        ("hook registered", "after handle.remove()"),
        rows,
        {"layer": path},
    )


def _handle_remove_code(s: Setting) -> str:
    m = module_expression(s.picks.path("layer"))
    body = f"""calls = []
handle = {m}.register_forward_hook(lambda module, inputs, output: calls.append(1))
print("forward hooks:", len({m}._forward_hooks))
with torch.no_grad():
    model(x)
print("calls:", len(calls))  # 1

handle.remove()
print("forward hooks after handle.remove():", len({m}._forward_hooks))
with torch.no_grad():
    model(x)
print("calls:", len(calls))  # still 1: the hook is gone"""
    return script("handle.remove()", s, body)


# ---- the pitfalls, live ------------------------------------------------------------------------------------------
def _pitfalls(s: Setting, hooks: Handles) -> Outcome:
    path, culprit_path = s.picks.path("victim"), s.picks.path("culprit")
    module = s.model.get_submodule(path)
    culprit = s.model.get_submodule(culprit_path)
    hooks.remember(module)
    kept: dict[str, torch.Tensor] = {}

    def keep(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        kept["no clone"] = output.detach()  # a view of the very tensor the in-place op writes into
        kept["clone"] = output.detach().clone()

    # 1. A capture without clone: the in-place op after the module overwrites it.
    handle = hooks.add(module.register_forward_hook(keep))
    with torch.no_grad():
        s.model(s.x)
    hooks.remove(handle)
    no_clone, clone = cpu_copy(kept["no clone"]), cpu_copy(kept["clone"])
    with torch.no_grad():
        overwritten = cpu_copy(culprit.forward(kept["clone"].clone()))  # what the in-place op makes of the true output
    capture_wrong = not torch.equal(no_clone, clone) and torch.equal(no_clone, overwritten)

    # 2. A full backward hook on the module: the in-place op then modifies the hook's view of the output.
    raised = ""
    full = hooks.backward_hook(module, lambda *_: None, full=True)
    try:
        forward_backward(s)
    except RuntimeError as error:
        raised = first_line(error)
    finally:
        hooks.remove(full)

    # 3. Hookscope's fix: the Grad tick on the module, a tensor hook on its output (the tensor itself, not the
    # module's boundary: an in-place op after the module cannot break it).
    registry = hooks.registry(s.model)
    registry.add(path, "tensor")
    result = run_capture(s, registry)
    info = next(i for i in registry.handles() if i.path == path)
    grad = record_of(result, path, "tensor")
    registry.clear()
    # ... against the gradient of the network with the op not in place (autograd.grad on the module's output).
    outputs: list[torch.Tensor] = []
    hooks.not_in_place(culprit)
    handle = hooks.add(module.register_forward_hook(lambda m, i, output: outputs.append(output)))
    with torch.enable_grad():
        output = s.model(s.x.detach().clone().requires_grad_(True))
        score, _, _ = _objective(output, result.target_index if result.target_index is not None else "top1")
        reference = cpu_copy(torch.autograd.grad(score, outputs[0])[0])
    hooks.remove_all()
    diff = max_diff(grad, reference)
    fix_ok = info.method == TENSOR and close(grad, reference)
    ok = capture_wrong and bool(raised) and fix_ok
    culprit_name = type(culprit).__name__
    rows = [
        Row(f"min of {path}'s output as kept", num(no_clone.min()), num(clone.min())),
        Row("what was kept", f"{culprit_path}'s result (overwritten)", f"{path}'s true output"),
        Row(
            f"gradient of {path}'s output",
            f"register_full_backward_hook raises: {raised}" if raised else "register_full_backward_hook: no error",
            f"{info.method}: max |difference| from the non-in-place network {num(diff)}",
        ),
    ]
    return Outcome(
        ok,
        f"Kept without clone, {path}'s output was overwritten by the in-place {culprit_name} ({culprit_path}): min "
        f"{num(no_clone.min())}; with clone the true values: min {num(clone.min())}. A full backward hook on {path} "
        f"{'raised' if raised else 'did not raise'}; Hookscope's fix, a tensor hook on the output, gives the gradient "
        f"of the network without the in-place op (max difference {num(diff)}).",
        f"{path}: kept min {num(no_clone.min())} without clone, {num(clone.min())} with; full backward hook "
        f"{'raises' if raised else 'does not raise'}; tensor-hook fix differs by {num(diff)}",
        ("the pitfall", "the fix"),
        rows,
        {"victim": path, "culprit": culprit_path},
        {"no_clone": no_clone, "clone": clone, "grad": grad, "reference": reference},
        [info.note] if info.note else [],
    )


def _pitfalls_code(s: Setting) -> str:
    path = s.picks.path("victim")
    m = module_expression(path)
    code = hook_snippet(HookInfo(path, "tensor", TENSOR))
    handles = ", ".join(handle_names(code))
    key = captured_key(path, "tensor")
    body = f'''kept = {{}}


def keep(module, inputs, output):
    kept["no clone"] = output.detach()  # the very tensor the in-place op writes into next
    kept["clone"] = output.detach().clone()


handle = {m}.register_forward_hook(keep)
with torch.no_grad():
    model(x)
handle.remove()
print("min without clone:", kept["no clone"].min().item(), "with clone:", kept["clone"].min().item())

handle = {m}.register_full_backward_hook(lambda module, grad_input, grad_output: None)
try:
    image_grad()
    print("the full backward hook did not raise")
except RuntimeError as error:
    print("the full backward hook raises:", str(error).splitlines()[0])
finally:
    handle.remove()

# The fix Hookscope uses:
captured = {{}}
{code.strip()}

image_grad()
for handle in ({handles},):
    handle.remove()
print("gradient of the output, mean |.|:", captured["{key}"].abs().mean().item())'''
    return script("the pitfalls: in-place ops after a hook", s, body)


def _pitfalls_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.path("victim"), "forward"), (picks.path("victim"), "tensor")))  # the Act and Grad columns


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        "handle-remove",
        "handle.remove(): every hook comes off again",
        "all",
        "Every register_* call returns a handle; handle.remove() takes the hook off the module, and it never fires "
        "again. A hook left behind keeps running (and keeping tensors alive) in every later pass. Hookscope removes "
        "each handle on untick, model switch, and when a run raises.",
        "layer",
        _handle_remove,
        _handle_remove_code,
        registers=(("forward", FORWARD),),
    ),
    Lesson(
        "pitfalls",
        "Pitfalls, live: in-place ops after a hook",
        "all",
        "A forward hook that keeps output without clone keeps the tensor an in-place ReLU then overwrites: ResNet's "
        "bn1 looks like min 0.0 instead of its true negative values. A full backward hook there raises, because the "
        "in-place op modifies the hook's view of the output. Hookscope clones where a survey finds such an op, and "
        "its Grad tick takes the gradient with a tensor hook on the output, which the in-place op cannot break.",
        "victim",
        _pitfalls,
        _pitfalls_code,
        _pitfalls_setup,
        registers=(("forward", FORWARD), ("backward", FULL_BACKWARD), ("tensor", TENSOR)),
    ),
)
