"""Plain PyTorch for every hook Hookscope holds, so that what was done in the window can be redone in a script.

``hook_snippet`` gives the code of one hook: a function and the line that registers it on a variable ``model``;
reading hooks keep what they see in a dict ``captured`` under ``captured_key(path, kind)`` (a list, one entry per
call, for a module that runs more than once per forward pass); ``edit_snippet`` and ``mix_reference_snippet`` the
code of an edit. The code is meant to be read: one hook, one short function. ``KIND_HOOKS``
says which PyTorch hook each kind registers and why that one (the Grad column's gradient through a tensor hook,
grad_input through the full backward hook that alone gives it).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable

from torch import nn

from hookscope.core.engine.attention import ATTENTION_METHOD
from hookscope.core.engine.hooks import FALLBACK, FORWARD, FULL_BACKWARD, PRE, TENSOR, HookInfo, HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.engine.tree import ModuleRun

# Which PyTorch hook each kind registers, and why that one: said once here for every place that teaches hooks (the
# tree's column tips, the hook inspector, the lessons, the snippets' comments).
KIND_HOOKS: dict[str, str] = {
    "pre": "register_forward_pre_hook: what goes into the module, before it runs",
    "forward": "register_forward_hook: the module's output, after it ran",
    "tensor": (
        "Tensor.register_hook on the module's output, put there by a forward hook: d target / d output. A tensor "
        "hook sits on the tensor itself, so it stays exact where an in-place op follows the module, and it sees a "
        "scale-grad edit on the same module"
    ),
    "backward": (
        "register_full_backward_hook: grad_output (d target / d output) read at the module's boundary, before a "
        "scale-grad edit on the same module acts; where an in-place op makes it raise, a tensor hook on the output "
        "is used instead"
    ),
    "grad_input": (
        "register_full_backward_hook: grad_input (d target / d input), the only hook that gives it. Where it cannot "
        "work (an in-place op), tensor hooks on the input tensors are used: they get the gradient of each input "
        "tensor as a whole"
    ),
    "attention": (
        "register_forward_pre_hook + register_forward_hook around a torch function mode: the module's attention "
        "weights (batch, heads, queries, keys), computed explicitly inside this module only, also where the model "
        "runs fused attention (scaled_dot_product_attention), in which they never exist"
    ),
}


def kind_hook(kind: str) -> str:
    """The hook a kind registers and why, in one sentence (``KIND_HOOKS``)."""
    return KIND_HOOKS.get(kind, kind)


def captured_key(path: str, kind: str) -> str:
    """The key a reading hook's snippet stores under: ``"forward:layer1"``, ``"tensor:bn1"``."""
    return f"{kind}:{path or '(model)'}"


def module_expression(path: str) -> str:
    """``model.layer1`` where plain attribute access is safe, else ``model.get_submodule("layer4.1.conv2")``."""
    if not path:
        return "model"
    parts = path.split(".")
    if all(p.isidentifier() and not keyword.iskeyword(p) and not hasattr(nn.Module, p) for p in parts):
        return "model." + path
    return f"model.get_submodule({literal(path)})"


def _ident(path: str) -> str:
    return re.sub(r"\W", "_", path, flags=re.ASCII) or "model"


def literal(text: str) -> str:
    """``text`` as a Python string literal: repr's (a module's name never becomes code), in double quotes where it
    holds no quote (repr then needs no escape for one), as the rest of the generated code is written."""
    code = repr(text)
    return f'"{code[1:-1]}"' if code.startswith("'") and '"' not in text and "'" not in text else code


def one_line(text: object) -> str:
    """Text for a comment of generated code: unprintable characters escaped as repr does, so that a newline in a
    module's name cannot end the comment and start code."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def _float(value: float) -> str:
    return repr(float(value))


def _channels(edit: Intervention) -> str:
    return "[" + ", ".join(str(c) for c in edit.channels) + "]"


def _register(handle: str, module: str, method: str, function: str, extra: str = "") -> list[str]:
    return ["", "", f"{handle} = {module}.{method}({function}{extra})", f"# remove with {handle}.remove()"]


def hook_snippet(info: HookInfo, intervention: Intervention | None = None, *, run: ModuleRun | None = None) -> str:
    """Runnable Python that registers the equivalent of ``info`` on ``model``.

    Edits need their ``intervention`` (``registry.edit(info.edit_id)``). ``run`` (from the survey) tells how
    often the module runs per forward pass and what it returns; without it, once and a tensor.
    """
    calls = run.calls if run is not None and run.calls > 1 else 1
    form = run.output_form if run is not None else "tensor"
    if info.reads_or_edits == "edits" or info.edit_id is not None:
        if intervention is None:
            raise ValueError(f"The snippet of an edit needs its Intervention (edit {info.edit_id} on {info.path}).")
        return edit_snippet(intervention, info.edit_id or 0, calls=calls)
    return "\n".join(_read_snippet(info, calls, form)) + "\n"


# long because: one branch per hook method, each the code a user reads; side by side so the hooks can be compared
def _read_snippet(info: HookInfo, calls: int, form: str) -> list[str]:
    path, module = info.path, module_expression(info.path)
    shown = one_line(path)  # in comments
    key = captured_key(path, info.kind)
    ident = _ident(path)
    many = calls > 1
    lines: list[str] = []

    def keep(value: str, front: bool = False) -> str:
        if not many:
            return f"captured[{literal(key)}] = {value}"
        return f"captured.setdefault({literal(key)}, []).{'insert(0, ' if front else 'append('}{value})"

    if info.method == FORWARD:
        name = f"save_output_{ident}"
        lines.append(
            f"# {shown or 'The model'}'s output: a forward hook gets (module, inputs, output) after the module ran."
        )
        if many:
            lines.append(f"# It runs {calls} times per forward pass: one entry per call.")
        lines.append(f"def {name}(module, inputs, output):")
        if form == "tensor":
            value = "output.detach().clone()"
        elif form == "tuple":
            value = "tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in output)"
        else:
            lines.append("    # The output is a nested structure: copy the tensors in it that you need.")
            value = "output"
        lines.append(f"    {keep(value)}  # a copy: a later in-place op must not change it")
        return lines + _register(f"h_{name}", module, "register_forward_hook", name)

    if info.method == PRE:
        name = f"save_input_{ident}"
        lines.append(
            f"# {shown or 'The model'}'s input: a forward pre-hook gets (module, inputs) before the module runs."
        )
        if many:
            lines.append(f"# It runs {calls} times per forward pass: one entry per call.")
        lines.append(f"def {name}(module, inputs):")
        lines.append(f"    {keep('inputs[0].detach().clone()')}  # inputs is a tuple of the positional arguments")
        return lines + _register(f"h_{name}", module, "register_forward_pre_hook", name)

    if info.kind == "grad_input":
        return lines + _grad_input_snippet(info, ident, module, calls, keep)

    if info.method == FULL_BACKWARD:
        name = f"save_grad_output_{ident}"
        lines.append(
            f"# The gradient of {shown or 'the model'}'s output: a full backward hook gets "
            "(module, grad_input, grad_output) when the gradient reaches the module."
        )
        lines.append(
            "# (The window's Grad column uses a tensor hook on the output for this: exact after in-place ops.)"
        )
        if many:
            lines.append(f"# It runs {calls} times per forward pass; backward hooks fire last call first.")
        lines.append(f"def {name}(module, grad_input, grad_output):")
        lines.append(f"    {keep('grad_output[0].detach().clone()', front=True)}")
        return lines + _register(f"h_{name}", module, "register_full_backward_hook", name)

    if info.method in (TENSOR, FALLBACK):
        name = f"save_output_grad_{ident}"
        if info.method == FALLBACK:
            note = info.note or "A full backward hook cannot be used here; a tensor hook on its output is used instead."
            lines.append(f"# {one_line(note)}")
        lines.append(
            f"# The gradient of {shown or 'the model'}'s output: a forward hook puts a tensor hook on the output; "
            "the tensor hook gets the gradient."
        )
        if info.method == TENSOR:
            lines.append(
                "# On the tensor itself, it stays exact where an in-place op follows the module, and it sees a"
            )
            lines.append("# scale-grad edit (a tensor hook registered before it) on the same module.")
        lines.append(f"def {name}(module, inputs, output):")
        tensor = "output" if form == "tensor" else "output[0]"
        if form != "tensor":
            lines.append("    # The output is not a single tensor: this keeps the gradient of its first tensor.")
        if many:
            lines.append(f"    # It runs {calls} times per forward pass: one entry per call, in forward order.")
            lines.append(f"    entries = captured.setdefault({literal(key)}, [])")
            lines.append("    entries.append(None)")
            lines.append("    call = len(entries) - 1")
            lines.append("")
            lines.append("    def save(grad):")
            lines.append("        entries[call] = grad.detach().clone()")
        else:
            lines.append("    def save(grad):")
            lines.append(f"        captured[{literal(key)}] = grad.detach().clone()")
        lines.append("")
        lines.append(f"    if {tensor}.requires_grad:  # only tensors that require grad take tensor hooks")
        lines.append(f"        {tensor}.register_hook(save)")
        return lines + _register(f"h_{name}", module, "register_forward_hook", name)

    if info.method == ATTENTION_METHOD:
        return lines + _attention_snippet(shown, ident, module, keep)
    raise ValueError(f"No snippet for hook method '{info.method}'.")


def _attention_snippet(shown: str, ident: str, module: str, keep: Callable[[str], str]) -> list[str]:
    """The Attn tick in plain PyTorch, for scaled_dot_product_attention (Hookscope's mode also keeps an eager
    softmax and nn.MultiheadAttention's per-head weights: ``hookscope.core.engine.attention``)."""
    mode = f"attention_{ident}"
    return [
        f"# {shown}'s attention weights (batch, heads, queries, keys). A fused scaled_dot_product_attention never",
        "# forms them: a torch function mode, entered by a forward pre-hook and left by a forward hook, computes",
        "# softmax(Q K^T * scale + mask) inside this module only and hands weights @ V to the model.",
        "from torch.overrides import TorchFunctionMode",
        "",
        "",
        f"class Attention_{ident}(TorchFunctionMode):",
        "    def __torch_function__(self, func, types, args=(), kwargs=None):",
        "        kwargs = kwargs or {}",
        "        if func is not torch.nn.functional.scaled_dot_product_attention:",
        "            return func(*args, **kwargs)",
        "        q, k, v = args[:3]",
        '        mask, scale = kwargs.get("attn_mask"), kwargs.get("scale") or q.shape[-1] ** -0.5',
        "        scores = torch.matmul(q, k.transpose(-2, -1)) * scale",
        "        if mask is not None:",
        '            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask',
        "        weights = torch.softmax(scores, dim=-1)",
        f"        {keep('weights.detach().clone()')}",
        "        return weights @ v",
        "",
        "",
        f"{mode} = Attention_{ident}()",
        "",
        "",
        f"def enter_{ident}(module, inputs):  # returns None: the inputs go on unchanged",
        f"    {mode}.__enter__()",
        "",
        "",
        f"def leave_{ident}(module, inputs, output):",
        f"    {mode}.__exit__(None, None, None)",
        "",
        "",
        f"h_pre_{ident} = {module}.register_forward_pre_hook(enter_{ident})",
        f"h_{ident} = {module}.register_forward_hook(leave_{ident}, always_call=True)  # also when the module raises",
        f"# remove with h_pre_{ident}.remove() and h_{ident}.remove()",
    ]


def _grad_input_snippet(info: HookInfo, ident: str, module: str, calls: int, keep: Callable[..., str]) -> list[str]:
    """grad_input: a full backward hook (the only hook that gives it), or tensor hooks on the inputs where it
    cannot work."""
    path = one_line(info.path) or "the model"  # in comments only
    many = calls > 1
    lines: list[str] = []
    if info.method == FULL_BACKWARD:
        name = f"save_grad_input_{ident}"
        lines.append(
            f"# The gradient of the target with respect to {path}'s input (grad_input): only a full backward hook "
            "gives it;"
        )
        lines.append("# it gets (module, grad_input, grad_output) when the gradient reaches the module.")
        if many:
            lines.append(f"# It runs {calls} times per forward pass; backward hooks fire last call first.")
        lines.append(f"def {name}(module, grad_input, grad_output):")
        lines.append("    # grad_input has an entry per positional input: None where that input needs no gradient.")
        lines.append("    if grad_input[0] is not None:")
        lines.append(f"        {keep('grad_input[0].detach().clone()', front=True)}")
        return lines + _register(f"h_{name}", module, "register_full_backward_hook", name)
    if info.method == FALLBACK:
        name = f"save_input_grad_{ident}"
        lines.append(f"# {one_line(info.note or 'A full backward hook cannot be used here.')}")
        lines.append(
            f"# The gradient of {path}'s input: a forward pre-hook puts a tensor hook on the input; the tensor hook "
            "gets its gradient."
        )
        lines.append(f"def {name}(module, inputs):")
        if many:
            lines.append(f"    # It runs {calls} times per forward pass: one entry per call, in forward order.")
            lines.append(f"    entries = captured.setdefault({literal(captured_key(info.path, info.kind))}, [])")
            lines.append("    entries.append(None)")
            lines.append("    call = len(entries) - 1")
            lines.append("")
            lines.append("    def save(grad):")
            lines.append("        entries[call] = grad.detach().clone()")
        else:
            lines.append("    def save(grad):")
            lines.append(f"        captured[{literal(captured_key(info.path, info.kind))}] = grad.detach().clone()")
        lines.append("")
        lines.append("    if inputs[0].requires_grad:  # only tensors that require grad take tensor hooks")
        lines.append("        inputs[0].register_hook(save)")
        return lines + _register(f"h_{name}", module, "register_forward_pre_hook", name)
    raise ValueError(f"No snippet for grad_input through '{info.method}'.")


def mix_reference_snippet(edit: Intervention, edit_id: int = 0) -> str:
    """The other image once through the model (no edits, no gradients), keeping the mixed module's output.

    Run it before any other edit is registered: Hookscope blends in the unedited network's output.
    """
    name = f"keep_other_{edit_id}_{_ident(edit.path)}"
    lines = [
        f"# {one_line(edit.path)}'s output on {one_line(edit.other_image)}, from one pass without gradients and "
        "before any edit:",
        f"mix_outputs_{edit_id} = []",
        "",
        "",
        f"def {name}(module, inputs, output):",
        f"    mix_outputs_{edit_id}.append(output.detach().clone())",
        "",
        "",
        f"h_{name} = {module_expression(edit.path)}.register_forward_hook({name})",
        "with torch.no_grad():",
        f"    model(others[{edit.other_image!r}])  # others: the other images, preprocessed like the input",
        f"h_{name}.remove()",
    ]
    return "\n".join(lines) + "\n"


def edit_snippet(edit: Intervention, edit_id: int = 0, *, calls: int = 1, with_reference: bool = True) -> str:
    """Runnable Python that registers ``edit`` on ``model``: a hook that returns the replacement value.

    ``prepend=True`` makes it run before the module's other hooks, so they see the edited value, as in Hookscope.
    """
    module = module_expression(edit.path)
    name = f"edit{edit_id}_{edit.kind.replace('-', '_')}_{_ident(edit.path)}"
    factor = _float(edit.factor)
    lines = [f"# {one_line(edit.describe())}."]
    if edit.kind in ("zero", "keep", "scale", "mix"):
        lines.append("# A forward hook that returns a value replaces the module's output.")
        prefix: list[str] = []
        body = [f"def {name}(module, inputs, output):"]
        if edit.kind == "zero":
            body += [
                "    output = output.clone()  # a new tensor: never change the module's own output in place",
                f"    output[:, {_channels(edit)}] = 0",
                "    return output",
            ]
        elif edit.kind == "keep":
            body += [
                "    off = torch.ones(output.shape[1], dtype=torch.bool, device=output.device)",
                f"    off[{_channels(edit)}] = False  # every channel but these",
                "    output = output.clone()  # a new tensor: never change the module's own output in place",
                "    output[:, off] = 0",
                "    return output",
            ]
        elif edit.kind == "scale" and edit.channels:
            body += [
                "    output = output.clone()  # a new tensor: never change the module's own output in place",
                f"    output[:, {_channels(edit)}] = output[:, {_channels(edit)}] * {factor}",
                "    return output",
            ]
        elif edit.kind == "scale":
            body += [f"    return output * {factor}"]
        else:  # mix
            if with_reference:
                prefix = [mix_reference_snippet(edit, edit_id), ""]
            if calls > 1:
                body = [
                    f"mix_calls_{edit_id} = [0]  # the module runs {calls} times per forward pass: blend call k with call k",
                    "",
                    "",
                    *body,
                    f"    other = mix_outputs_{edit_id}[mix_calls_{edit_id}[0] % len(mix_outputs_{edit_id})]",
                    f"    mix_calls_{edit_id}[0] += 1",
                ]
            else:
                body.append(f"    other = mix_outputs_{edit_id}[0]")
            body.append(f"    return {factor} * output + (1 - {factor}) * other")
        lines = prefix + lines + body + _register(f"h_{name}", module, "register_forward_hook", name, ", prepend=True")
    elif edit.kind == "scale-input":
        lines += [
            "# A forward pre-hook that returns a tuple replaces the module's inputs.",
            f"def {name}(module, inputs):",
            f"    return tuple(x * {factor} if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)",
        ]
        lines += _register(f"h_{name}", module, "register_forward_pre_hook", name, ", prepend=True")
    elif edit.kind == "scale-grad":
        lines += [
            "# A tensor hook that returns a tensor replaces the gradient; a forward hook puts it on the output.",
            f"def {name}(module, inputs, output):",
            "    if output.requires_grad:",
            f"        output.register_hook(lambda grad: grad * {factor})",
        ]
        lines += _register(f"h_{name}", module, "register_forward_hook", name, ", prepend=True")
    elif edit.kind == "scale-grad-input":
        lines += [
            "# A full backward hook that returns a tuple replaces grad_input, the gradient the module passes back.",
            f"def {name}(module, grad_input, grad_output):",
            f"    return tuple(g * {factor} if g is not None else None for g in grad_input)",
        ]
        lines += _register(f"h_{name}", module, "register_full_backward_hook", name, ", prepend=True")
    else:
        raise ValueError(f"No snippet for edit kind '{edit.kind}'.")
    return "\n".join(lines) + "\n"


def snippet_for(registry: HookRegistry, info: HookInfo) -> str:
    """The snippet of one row of the hook inspector."""
    survey = registry.survey
    run = survey.run_of(info.path) if survey is not None else None
    edit = registry.edit(info.edit_id) if info.edit_id is not None else None
    return hook_snippet(info, edit, run=run)
