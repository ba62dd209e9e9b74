"""Receptive fields from the architecture: per module, per output position, the input pixels it is connected to,
computed once per module (not once per unit), for the scan's default boxes.

The definition: the bounding box of every input pixel the unit is connected to through the network's graph, which is
the exact gradient box (``ChannelScanner.unit_boxes``) of the same unit with every gate open: every ReLU passing and
every max-pool spreading its gradient over its whole window (the network made linear, its weights nonzero). So it
always holds the gradient box of the unit in a given image, which can be smaller (a ReLU that is off, a max-pool
that routes to one pixel of its window, or a unit whose gradient is zero: no box at all).

How: the model is traced with ``torch.fx`` (the output of every module is the first value its call returns), the
shapes come from one forward pass at the input size, and an interval per row and per column (the input rows and
columns it reaches, start and end exclusive) is carried through the graph: a convolution or pooling window takes the
union of the intervals under its window (zero padding reaches nothing), an element-wise operation (batch norm in eval
mode, activations, dropout, a residual sum, a concatenation of channels) the union of its operands', an adaptive
pooling the union over its bin, and a layer that mixes every position (a linear layer after a flatten) the whole
input. A box is then (columns of x) x (rows of y): the field of a position is the product of its row's and its
column's intervals, true for every operation above.

Where the architecture does not allow it (a model fx cannot trace, an operation outside the list above: attention,
interpolation, reflect padding, normalisation over positions), ``receptive_fields`` leaves the module out with its
reason and the scan computes that module's boxes by the gradient definition instead.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from hookscope.core.scan.results import Box

# Modules that act on each position alone (in eval mode): the field of the output is the field of the input.
POINTWISE = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU,
    nn.SiLU, nn.Mish, nn.Sigmoid, nn.Tanh, nn.Hardswish, nn.Hardsigmoid, nn.Hardtanh, nn.Softplus, nn.Identity,
    nn.Dropout, nn.Dropout2d, nn.AlphaDropout, nn.Flatten,
)  # fmt: skip
POINTWISE_FUNCTIONS = {
    operator.add, operator.iadd, operator.mul, operator.imul, operator.sub, operator.isub, operator.truediv,
    operator.neg, torch.add, torch.mul, torch.sub, torch.relu, torch.sigmoid, torch.tanh, torch.nn.functional.relu,
    torch.nn.functional.relu6, torch.nn.functional.gelu, torch.nn.functional.silu, torch.nn.functional.hardswish,
    torch.nn.functional.dropout, torch.nn.functional.hardsigmoid, torch.nn.functional.sigmoid,
}  # fmt: skip
try:  # torchvision's stochastic depth (EfficientNet, ConvNeXt) is the identity in eval mode
    from torchvision.ops import stochastic_depth as _stochastic_depth

    POINTWISE_FUNCTIONS.add(_stochastic_depth)
except ImportError:  # pragma: no cover - torchvision is a dependency
    pass
POINTWISE_METHODS = {"add", "add_", "mul", "mul_", "relu", "relu_", "sigmoid", "tanh", "contiguous", "clone",
                     "float", "to", "type_as", "__add__", "__mul__"}  # fmt: skip


class NotAnalytic(Exception):
    """The architecture does not allow a field computed from its graph (the message says why)."""


@dataclass(frozen=True)
class Field:
    """Per output row and column of a (N, C, H, W) tensor: the input rows and columns (start, end exclusive) it
    reaches; a start equal to its end reaches nothing. ``whole``: a tensor without positions (N, F) whose every
    element reaches every pixel of ``rows`` x ``cols`` (one row and one column interval each)."""

    rows: np.ndarray  # (H, 2) int64
    cols: np.ndarray  # (W, 2) int64
    whole: bool = False
    flat: bool = False  # positions flattened into features: each element has a field of its own (not kept)

    def box(self, y: int, x: int) -> Box | None:
        """The field of position (y, x) as (x0, y0, x1, y1) in input pixels; None when it reaches nothing."""
        (y0, y1), (x0, x1) = self.rows[0 if self.whole else y], self.cols[0 if self.whole else x]
        return (int(x0), int(y0), int(x1), int(y1)) if x0 < x1 and y0 < y1 else None

    def union(self, other: Field) -> Field:
        if self.whole or other.whole:
            return _whole(self.outer(other), self.flat or other.flat)
        rows, cols = _broadcast(self.rows, other.rows), _broadcast(self.cols, other.cols)
        return Field(rows, cols)

    def outer(self, other: Field | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The bounding (row, column) interval of everything this field (and ``other``) reaches."""
        fields = [self] if other is None else [self, other]
        rows = np.concatenate([f.rows for f in fields])
        cols = np.concatenate([f.cols for f in fields])
        return _span(rows), _span(cols)


def _span(intervals: np.ndarray) -> np.ndarray:
    reaching = intervals[intervals[:, 0] < intervals[:, 1]]
    if not len(reaching):
        return np.zeros((1, 2), dtype=np.int64)
    return np.array([[reaching[:, 0].min(), reaching[:, 1].max()]], dtype=np.int64)


def _whole(spans: tuple[np.ndarray, np.ndarray], flat: bool = False) -> Field:
    return Field(spans[0], spans[1], whole=True, flat=flat)


def _broadcast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 1 and len(b) > 1:
        a = np.repeat(a, len(b), axis=0)
    elif len(b) == 1 and len(a) > 1:
        b = np.repeat(b, len(a), axis=0)
    if len(a) != len(b):
        raise NotAnalytic(f"operands of {len(a)} and {len(b)} positions")
    return _join(a, b)


def _join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per position, the smallest interval holding both (an empty one adds nothing)."""
    a_empty, b_empty = a[:, 0] >= a[:, 1], b[:, 0] >= b[:, 1]
    joined = np.stack([np.minimum(a[:, 0], b[:, 0]), np.maximum(a[:, 1], b[:, 1])], axis=1)
    joined[a_empty] = b[a_empty]
    joined[b_empty & ~a_empty] = a[b_empty & ~a_empty]
    return joined


def _window(intervals: np.ndarray, out: int, kernel: int, stride: int, padding: int, dilation: int) -> np.ndarray:
    """Output i of a window op sees inputs i*stride - padding + j*dilation (j < kernel) that lie inside."""
    taps = np.arange(out)[:, None] * stride - padding + dilation * np.arange(kernel)[None, :]  # (out, kernel)
    inside = (taps >= 0) & (taps < len(intervals))
    picked = intervals[np.clip(taps, 0, len(intervals) - 1)]  # (out, kernel, 2)
    reaching = inside & (picked[..., 0] < picked[..., 1])
    big = np.iinfo(np.int64).max
    start = np.where(reaching, picked[..., 0], big).min(axis=1)
    end = np.where(reaching, picked[..., 1], -1).max(axis=1)
    empty = ~reaching.any(axis=1)
    start[empty], end[empty] = 0, 0
    return np.stack([start, end], axis=1).astype(np.int64)


def _bins(intervals: np.ndarray, out: int) -> np.ndarray:
    """Adaptive pooling: bin i spans floor(i*H/out) to ceil((i+1)*H/out)."""
    size = len(intervals)
    result = np.zeros((out, 2), dtype=np.int64)
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        result[i] = _span(intervals[start:end])[0]
    return result


def _pair(value: Any) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _out_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil: bool) -> int:
    """PyTorch's output length of a window op (with ceil_mode: a last window must start inside the input or its
    left padding)."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + padding:
        out -= 1
    if out < 1:
        raise NotAnalytic("a window larger than its input")
    return out


def receptive_fields(model: nn.Module, paths: list[str] | tuple[str, ...], size: tuple[int, int, int]
                     ) -> tuple[dict[str, Field], dict[str, str]]:  # fmt: skip
    """Per module path, its ``Field`` for an input of ``size`` (C, H, W); and per path left out, the reason.
    Reads the model's graph and its modules' settings only: nothing runs."""
    import torch.fx as fx

    outputs: dict[str, fx.Node] = {}

    class Tracer(fx.Tracer):
        def call_module(self, module: nn.Module, forward: Any, args: Any, kwargs: Any) -> Any:
            result = super().call_module(module, forward, args, kwargs)
            if isinstance(result, fx.Proxy):
                outputs.setdefault(self.path_of_module(module), result.node)  # the first call, as the scan reads
            return result

    wanted = list(paths)
    training = model.training
    try:
        model.eval()  # traced as the scan runs it (dropout, stochastic depth: the identity)
        graph = Tracer().trace(model)
    except Exception as error:  # noqa: BLE001 - any model fx cannot trace or run keeps the gradient definition
        reason = f"torch.fx cannot trace the model ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
        return {}, {p: reason for p in wanted}
    finally:
        model.train(training)
    modules = dict(model.named_modules())
    values: dict[fx.Node, Field | str | None] = {}  # a node's field, or why it has none (None: not a tensor)
    first_input = True
    for node in graph.nodes:
        try:
            values[node] = _field_of(node, modules, values, size[1:] if first_input else None)
        except NotAnalytic as why:
            values[node] = str(why)
        if node.op == "placeholder":
            first_input = False
    fields, reasons = {}, {}
    for path in wanted:
        node = outputs.get(path) if path else next((n.args[0] for n in graph.nodes if n.op == "output"), None)
        value = values.get(node) if isinstance(node, fx.Node) else "its output is not one traced tensor"
        if value is None:
            value = "its output is not one traced tensor"
        if isinstance(value, Field) and value.flat:
            value = "its output flattens positions into features (each element has a field of its own)"
        if isinstance(value, Field):
            fields[path] = value
        else:
            reasons[path] = value
    return fields, reasons


def _field_of(node: Any, modules: dict[str, nn.Module], values: dict, size: tuple[int, int] | None
              ) -> Field | None:  # fmt: skip
    """A node's field; None for a node that is not a tensor reached from the input (a constant, a size). ``size``:
    (H, W) of the input, for the model's first input only."""
    if node.op == "placeholder":
        if size is None:
            return None
        rows = np.stack([np.arange(size[0]), np.arange(size[0]) + 1], axis=1).astype(np.int64)
        cols = np.stack([np.arange(size[1]), np.arange(size[1]) + 1], axis=1).astype(np.int64)
        return Field(rows, cols)
    if node.op in ("get_attr", "output"):
        return None
    inputs = []
    for arg in node.all_input_nodes:
        value = values.get(arg)
        if isinstance(value, str):
            raise NotAnalytic(value)  # an operand already beyond the graph's reach
        if value is not None:
            inputs.append(value)
    if not inputs:
        return None
    name = getattr(node.target, "__name__", node.target)
    if node.op == "call_method" and node.target in ("size", "dim") or node.op == "call_function" and \
            node.target is getattr:  # fmt: skip
        return None  # a number about the tensor, not the tensor
    if node.op == "call_module":
        return _module_field(modules[node.target], inputs[0], node.target)
    if node.op == "call_function" and node.target in POINTWISE_FUNCTIONS or node.op == "call_method" and \
            node.target in POINTWISE_METHODS:  # fmt: skip
        return _pointwise(inputs)
    if node.op == "call_function" and node.target is torch.cat:
        dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else 0)
        if dim in (1, -3):
            return _pointwise(inputs)
        raise NotAnalytic(f"a concatenation along dimension {dim}")
    if node.op == "call_function" and node.target is torch.flatten or node.op == "call_method" and \
            node.target in ("flatten", "view", "reshape"):  # fmt: skip
        return _flattened(inputs[0])
    raise NotAnalytic(f"the model's graph has {node.op} {name}, which the field is not carried through")


def _pointwise(inputs: list[Field]) -> Field:
    joined = inputs[0]
    for other in inputs[1:]:
        joined = joined.union(other)
    return joined


def _flattened(field: Field) -> Field:
    """A flatten, view or reshape: only of a tensor whose positions are one (N, C, 1, 1) -> (N, C), or already
    without positions (a reshape of positions would give each element a field of its own)."""
    if field.whole:
        return field
    return _whole(field.outer(), flat=len(field.rows) * len(field.cols) > 1)


def _module_field(module: nn.Module, field: Field, path: str) -> Field:
    if isinstance(module, nn.Flatten):
        return _flattened(field)
    if isinstance(module, POINTWISE):
        return field
    if isinstance(module, nn.Linear):
        if field.whole:
            return _whole(field.outer())  # every output reaches every feature, so every pixel any of them reaches
        raise NotAnalytic(f"{path} (Linear) over positions")
    if field.whole:
        raise NotAnalytic(f"{path} ({type(module).__name__}) after the positions were mixed")
    height, width = len(field.rows), len(field.cols)
    if isinstance(module, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)):
        kernel, stride = _pair(module.kernel_size), _pair(module.stride if module.stride is not None else 1)
        if isinstance(module, nn.Conv2d) and module.padding_mode != "zeros":
            raise NotAnalytic(f"{path} pads by {module.padding_mode}")
        dilation = _pair(getattr(module, "dilation", 1))
        ceil = bool(getattr(module, "ceil_mode", False))
        padding: Any = module.padding
        out: tuple[int, ...]
        if padding == "same":
            padding = tuple(d * (k - 1) // 2 for d, k in zip(dilation, kernel))
            out = (height, width)
        else:
            padding = _pair(0 if padding == "valid" else padding)
            out = tuple(_out_size(n, kernel[i], stride[i], padding[i], dilation[i], ceil)
                        for i, n in enumerate((height, width)))  # fmt: skip
        rows = _window(field.rows, out[0], kernel[0], stride[0], padding[0], dilation[0])
        cols = _window(field.cols, out[1], kernel[1], stride[1], padding[1], dilation[1])
        return Field(rows, cols)
    if isinstance(module, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
        asked: Any = module.output_size  # an int, or a pair where None keeps the input size
        pair = (asked, asked) if isinstance(asked, int) else asked
        bins = tuple(n if o is None else int(o) for o, n in zip(pair, (height, width)))
        return Field(_bins(field.rows, bins[0]), _bins(field.cols, bins[1]))
    raise NotAnalytic(f"{path} ({type(module).__name__}) is not one the field is carried through")
