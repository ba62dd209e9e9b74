"""The module tree, and what each module does when the model runs.

``module_tree`` is static (paths, types, parameter counts). ``survey`` runs the model once without gradients and
records, per module, how often it ran, the shapes it returned, and whether in-place operations touch its tensors:
those facts decide which captures must be cloned and where ``register_full_backward_hook`` cannot be used.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from hookscope.core.engine.structure import tensor_leaves

NOT_RUN_REASON = "did not run in the last forward pass: its parent uses its weights directly, or skips it in eval mode"


@dataclass(frozen=True)
class ModuleInfo:
    """One node of the module tree. The root has the path ``""``."""

    path: str
    name: str
    type_name: str
    params: int
    depth: int
    children: tuple[str, ...]


def module_tree(model: nn.Module) -> list[ModuleInfo]:
    """Every module (the root first, then depth-first in definition order) with its parameter count."""
    nodes = []
    for path, module in model.named_modules(remove_duplicate=False):
        children = tuple(f"{path}.{name}" if path else name for name, _ in module.named_children())
        nodes.append(
            ModuleInfo(
                path=path,
                name=path.rsplit(".", 1)[-1] if path else type(model).__name__,
                type_name=type(module).__name__,
                params=sum(p.numel() for p in module.parameters()),
                depth=path.count(".") + 1 if path else 0,
                children=children,
            )
        )
    return nodes


@dataclass(frozen=True)
class ModuleRun:
    """What one module did during a forward pass (all its calls together)."""

    calls: int
    output_shapes: tuple[tuple[int, ...], ...]
    output_leaves: tuple[str, ...]
    output_form: str  # "tensor", "tuple" (of tensors and non-tensors) or "structured"
    modifies_input: bool  # e.g. ReLU(inplace=True): a reference to its input goes stale
    output_modified_later: bool  # e.g. bn1 before an in-place ReLU, or bn2 before "out += identity"
    input_needs_grad: bool = True  # False for e.g. Swin V2's cpb_mlp, fed a fixed coordinate table
    # Per output leaf (first call, in ``output_leaves`` order), what autograd makes of it: "tracked" (it requires
    # grad), "integer" (integers and booleans have no gradient) or "untracked" (floating point, but computed
    # under no_grad, detached, or from constants). Says why a ticked gradient never arrives.
    leaf_autograd: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.calls > 0


NOT_RUN = ModuleRun(0, (), (), "tensor", False, False)


@dataclass
class ModelSurvey:
    input_shape: tuple[int, ...]
    device: str = "cpu"
    runs: dict[str, ModuleRun] = field(default_factory=dict)

    def run_of(self, path: str) -> ModuleRun:
        return self.runs.get(path, NOT_RUN)


def _output_form(output: object) -> str:
    if isinstance(output, torch.Tensor):
        return "tensor"
    if type(output) is tuple and not any(isinstance(x, (tuple, list, dict)) for x in output):
        return "tuple"
    return "structured"


def leaf_autograd(tensor: torch.Tensor) -> str:
    """ "tracked", "integer" or "untracked": see ``ModuleRun.leaf_autograd``."""
    if tensor.requires_grad:
        return "tracked"
    return "untracked" if tensor.is_floating_point() or tensor.is_complex() else "integer"


def survey(model: nn.Module, example: torch.Tensor) -> ModelSurvey:
    """Run ``model`` once on ``example`` and record what every module did.

    Tensor version counters tell in-place changes apart: a counter that moved after the module returned means a
    later in-place op overwrote its output; one that moved during the call means the module wrote into its input.
    Every temporary hook is removed before returning, even if the model raises.
    """
    calls: dict[str, int] = {}
    shapes: dict[str, list[tuple[int, ...]]] = {}
    leaves: dict[str, tuple[str, ...]] = {}
    forms: dict[str, str] = {}
    autograd: dict[str, tuple[str, ...]] = {}
    modifies_input: set[str] = set()
    input_needs_grad: set[str] = set()
    outputs: list[tuple[str, torch.Tensor, int]] = []
    pending_inputs: dict[str, list[list[tuple[torch.Tensor, int]]]] = {}

    def pre_hook(path: str) -> Callable[[nn.Module, tuple], None]:
        def hook(module: nn.Module, args: tuple) -> None:
            pending_inputs.setdefault(path, []).append([(t, t._version) for _, t in tensor_leaves(args)])

        return hook

    def post_hook(path: str) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            calls[path] = calls.get(path, 0) + 1
            for tensor, version in pending_inputs[path].pop():
                if tensor._version != version:
                    modifies_input.add(path)
                if tensor.requires_grad:
                    input_needs_grad.add(path)
            found = list(tensor_leaves(output))
            shapes.setdefault(path, []).extend(tuple(t.shape) for _, t in found)
            leaves.setdefault(path, tuple(name for name, _ in found))
            autograd.setdefault(path, tuple(leaf_autograd(t) for _, t in found))
            forms.setdefault(path, _output_form(output))
            outputs.extend((path, t, t._version) for _, t in found)

        return hook

    handles = []
    # Full backward hooks are set aside: the survey exists to find where they would raise. Grad mode is on so
    # that requires_grad tells which modules' inputs depend on the image at all.
    set_aside = {module: module._backward_hooks for module in model.modules() if module._backward_hooks}
    try:
        for module in set_aside:
            module._backward_hooks = OrderedDict()
        for path, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(pre_hook(path)))
            handles.append(module.register_forward_hook(post_hook(path)))
        with torch.enable_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="For backward hooks to be called")
            model(example.detach().requires_grad_(example.is_floating_point()))
    finally:
        for handle in handles:
            handle.remove()
        for module, hooks in set_aside.items():
            module._backward_hooks = hooks

    modified_later = {path for path, tensor, version in outputs if tensor._version != version}
    result = ModelSurvey(input_shape=tuple(example.shape), device=str(example.device))
    for path in calls:
        result.runs[path] = ModuleRun(
            calls=calls[path],
            output_shapes=tuple(shapes[path]),
            output_leaves=leaves[path],
            output_form=forms[path],
            modifies_input=path in modifies_input,
            output_modified_later=path in modified_later,
            input_needs_grad=path in input_needs_grad,
            leaf_autograd=autograd[path],
        )
    return result


# What the app ticks on a first start, so the first screen already shows feature maps and gradients.
DEFAULT_CHECKS: dict[str, tuple[str, ...]] = {
    "resnet18": ("layer1.0.conv1", "layer4.1.conv2"),
    "resnet50": ("layer1.0.conv2", "layer4.2.conv3"),
    "vit_b_16": ("encoder.layers.encoder_layer_3", "encoder.layers.encoder_layer_11"),
}


def default_ticks(model_name: str, nodes: list[ModuleInfo]) -> list[str]:
    """Two telling layers of any model: an early and a late one (convolutions, else transformer blocks)."""
    paths = {n.path for n in nodes}
    known = DEFAULT_CHECKS.get(model_name)
    if known and all(p in paths for p in known):
        return list(known)
    convs = [n.path for n in nodes if n.type_name == "Conv2d"]
    if len(convs) >= 4:
        return [convs[max(1, len(convs) // 8)], convs[-1]]
    blocks = [n.path for n in nodes if n.type_name.endswith(("Block", "Layer")) and n.depth >= 2]
    if len(blocks) >= 2:
        return [blocks[len(blocks) // 4], blocks[-1]]
    leaves = [n.path for n in nodes if not n.children and n.params > 0]
    return leaves[:1] + leaves[-1:] if len(leaves) >= 2 else leaves
