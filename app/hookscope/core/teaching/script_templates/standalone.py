"""The fixed parts of the standalone script ``app/hookscope/core/teaching/script_export.py`` writes, as one Python file.

Each part runs from its ``# @part NAME`` line to the next one and is copied into a script as it stands here (the
writer fills each ``__NAME__`` with a value, and writes the model, the hook registrations and the docstring
itself); the part named ``-`` is never written. Each part mirrors an engine function; the comments say which.
This file is kept out of ``ruff format`` (a reformat would change every script written): edit a part as the
scripts should read. Plain PyTorch, torchvision, Pillow and numpy: never Hookscope.
"""

# @part imports
import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping

import numpy as np
import torch
import torchvision
from PIL import Image, ImageOps
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

# @part -
# The values the writer fills in (each __NAME__ below) and the functions it writes itself, as stand-ins: with
# them this file reads as one script, so that ruff checks the parts as the scripts hold them. Not written.
__IMAGE__ = __RESIZE__ = __CROP__ = __MEAN__ = __STD__ = __CHANNELS__ = __INTERPOLATION__ = None
__ARCHIVES__ = __TARGET__ = __INPUT_SIZE__ = __OTHER_IMAGES__ = __MIXES__ = __DEVICE__ = None


def build_model():
    """The writer's: the model as Hookscope built it (torchvision's, timm's, a file's), in eval mode."""
    return torchvision.models.get_model("resnet18", weights=None).eval()


def register_hooks(model, mix_outputs):
    """The writer's: every hook and edit Hookscope had on the model; their handles."""
    return []


# @part unwrap
def unwrap(model):
    """The original module inside torch.compile (_orig_mod) and DataParallel (.module) wrappers: hooks fire there."""
    for _ in range(16):
        if type(model).__name__ == "OptimizedModule" and isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        elif isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            model = model.module
        else:
            return model
    return model


# @part load_weights
def load_weights(model, path):
    """A state_dict file, read without running code from it; wrappers ({"state_dict": ...}, DataParallel's "module."
    and torch.compile's "_orig_mod." prefixes) unwrapped; the tensors whose name and shape fit are loaded, as
    Hookscope did (all of them, unless it was asked for a non-strict load)."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(path, device="cpu")
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    for wrapper in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, Mapping) and isinstance(state.get(wrapper), Mapping):
            state = state[wrapper]
    state = {str(k): v for k, v in state.items()}
    for prefix in ("module.", "_orig_mod.") * 4:
        if all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    own = model.state_dict()
    if set(state) != set(own) and len({k.split(".", 1)[0] for k in state}) == 1 and all("." in k for k in state):
        inner = {k.split(".", 1)[1]: v for k, v in state.items()}  # one wrapper attribute around the whole model
        if set(inner) == set(own):
            state = inner
    model.load_state_dict({k: v for k, v in state.items() if k in own and v.shape == own[k].shape}, strict=False)


# @part image
# ---- the image, as the model sees it -----------------------------------------------------------------------------
IMAGE = __IMAGE__
RESIZE = __RESIZE__  # the shorter side, in pixels (None: no resize)
CROP = __CROP__  # the centre crop
MEAN = __MEAN__
STD = __STD__
CHANNELS = __CHANNELS__
INTERPOLATION = __INTERPOLATION__
MAX_RESIZED_ASPECT = 8  # a very wide or tall picture has only the part the crop keeps resized (to one grey level)


def read_image(path):
    """The file as 8-bit RGB, upright as its EXIF data says; transparent pixels white; wide modes scaled."""
    with Image.open(path) as opened:
        opened.load()
        image = ImageOps.exif_transpose(opened) or opened
        mode = image.mode
        if mode == "RGB":
            return image.copy()
        if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in image.info):
            rgba = image.convert("RGBA")
            return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
        if mode.startswith("I") or mode == "F":
            values = np.asarray(image).astype(np.float64)
            values = np.where(np.isfinite(values), values, 0.0)
            if mode.startswith("I;16") or (mode == "I" and values.size and values.min() >= 0 and values.max() <= 65535):
                values = values / 257.0
            elif mode == "F" and values.size and values.min() >= 0 and values.max() <= 1:
                values = values * 255.0
            elif values.size and values.max() > values.min():
                values = (values - values.min()) * (255.0 / (values.max() - values.min()))
            elif values.size:
                values = np.zeros_like(values)
            return Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8)).convert("RGB")
        return image.convert("RGB")


def resize(image):
    """The shorter side to RESIZE as torchvision's resize does (of a very wide picture, only what the crop keeps)."""
    mode = InterpolationMode(INTERPOLATION)
    width, height = image.size
    short, long = min(width, height), max(width, height)
    new_long = int(RESIZE * long / short) if short else 0
    if short == 0 or new_long <= MAX_RESIZED_ASPECT * max(RESIZE, CROP):
        return F.resize(image, [RESIZE], interpolation=mode, antialias=True)
    first = int(round((new_long - CROP) / 2.0))
    scale = long / new_long
    if width > height:
        box, size = (first * scale, 0.0, (first + CROP) * scale, float(height)), (CROP, RESIZE)
    else:
        box, size = (0.0, first * scale, float(width), (first + CROP) * scale), (RESIZE, CROP)
    filters = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
               "nearest": Image.Resampling.NEAREST}
    return image.resize(size, filters[INTERPOLATION], box=box)


def preprocess(image):
    """A (1, CHANNELS, CROP, CROP) float32 batch: resize, centre crop, [0, 1], then (x - MEAN) / STD."""
    wanted = "L" if CHANNELS == 1 else "RGB"
    image = image if image.mode == wanted else image.convert(wanted)
    if RESIZE is not None:
        image = resize(image)
    image = F.center_crop(image, [CROP])
    x = F.convert_image_dtype(F.pil_to_tensor(image), torch.float)
    return F.normalize(x, mean=MEAN, std=STD).unsqueeze(0)


# @part capture
# ---- what the hooks keep -----------------------------------------------------------------------------------------
ARCHIVES = __ARCHIVES__
captured = {}  # "activations/layer1.0.relu#1" -> tensor on the CPU, in the order the hooks fired
calls = {}  # (path, kind) -> how often the hook fired in this forward pass
backward_calls = {}  # path -> how often its full backward hook fired
grad_roots = []  # tensors off the input's path whose gradient is wanted too


def tensor_leaves(value, prefix=""):
    """(name, tensor) for every tensor in an output: "" for a tensor, "0"/"1" in tuples, keys in dicts..."""
    join = (lambda name: f"{prefix}.{name}" if prefix else name)
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for field in value._fields:
            yield from tensor_leaves(getattr(value, field), join(field))
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from tensor_leaves(item, join(str(index)))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from tensor_leaves(item, join(str(key)))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from tensor_leaves(getattr(value, field.name), join(field.name))


def record_key(path, call, leaf):
    """The export's key: the module path, "#k" for its k-th later call, "/leaf" inside a structured value."""
    return (path or "(model)") + (f"#{call}" if call else "") + (f"/{leaf}" if leaf else "")


def keep(kind, path, call, leaf, tensor):
    captured[f"{ARCHIVES[kind]}/{record_key(path, call, leaf)}"] = tensor.detach().to("cpu", copy=True)


def next_call(path, kind):
    calls[(path, kind)] = calls.get((path, kind), 0) + 1
    return calls[(path, kind)] - 1


# @part hook forward
def save_output(path):
    """register_forward_hook: fn(module, inputs, output) runs after the module; it keeps the output (a copy: a later
    in-place operation, such as ResNet's ReLU(inplace=True), would change it)."""

    def hook(module, inputs, output):
        call = next_call(path, "forward")
        for leaf, tensor in tensor_leaves(output):
            keep("forward", path, call, leaf, tensor)

    return hook


# @part hook pre
def save_input(path):
    """register_forward_pre_hook(with_kwargs=True): fn(module, args, kwargs) runs before the module; it keeps what
    goes in (a single positional input is the module's key itself)."""

    def hook(module, args, kwargs):
        call = next_call(path, "pre")
        leaves = list(tensor_leaves(args)) + list(tensor_leaves(kwargs))
        if len(leaves) == 1 and leaves[0][0] == "0":
            leaves = [("", leaves[0][1])]
        for leaf, tensor in leaves:
            keep("pre", path, call, leaf, tensor)

    return hook


# @part hook grad_output
def save_grad_output(path, calls, tuple_output):
    """register_full_backward_hook: fn(module, grad_input, grad_output) runs when the gradient reaches the module's
    boundary; grad_output is the gradient of its output. Backward hooks fire last call first. (Read there, before a
    tensor hook on the output, such as a scale-grad edit, has acted.)"""

    def hook(module, grad_input, grad_output):
        seen = backward_calls.get(path, 0)
        backward_calls[path] = seen + 1
        call = max(calls - 1 - seen, 0)
        names = [str(i) for i in range(len(grad_output))] if tuple_output else [""]
        for leaf, grad in zip(names, grad_output):
            if grad is not None:
                keep("backward", path, call, leaf, grad)

    return hook


# @part hook output_grad
def save_output_grad(path, kind, clone_view=False):
    """A forward hook that puts Tensor.register_hook on each output tensor: the tensor hook gets the gradient of
    that output, exact after an in-place op (where a full backward hook would raise) and after a scale-grad edit's
    tensor hook, registered before it."""

    def hook(module, inputs, output):
        if not torch.is_grad_enabled():
            return None
        call = next_call(path, kind)
        # An output that does not depend on the image (fixed tables) lies off the path to the input: the backward
        # pass is asked to reach it through the module's parameters, or its tensor hook would never fire.
        off_path = not any(t.requires_grad for _, t in tensor_leaves(inputs))
        if off_path:
            grad_roots.extend(p for p in module.parameters() if p.requires_grad)
        replaced = None
        if clone_view and isinstance(output, torch.Tensor) and output.requires_grad and output._is_view():
            output = replaced = output.clone()  # a view changed in place later: hook an identical copy instead
        for leaf, tensor in tensor_leaves(output):
            if tensor.requires_grad:
                tensor.register_hook(
                    lambda grad, leaf=leaf: keep(kind, path, call, leaf, grad) if grad is not None else None)
                if off_path:
                    grad_roots.append(tensor)
        return replaced

    return hook


# @part hook grad_input
def save_grad_input(path, calls):
    """register_full_backward_hook: fn(module, grad_input, grad_output) runs when the gradient reaches the module's
    boundary; grad_input is the gradient with respect to its inputs, one entry per positional input (None where an
    input needs none). Only a full backward hook gives it. Backward hooks fire last call first."""

    def hook(module, grad_input, grad_output):
        seen = backward_calls.get(path, 0)
        backward_calls[path] = seen + 1
        call = max(calls - 1 - seen, 0)
        for index, grad in enumerate(grad_input):
            if grad is not None:
                keep("grad_input", path, call, "" if len(grad_input) == 1 else str(index), grad)

    return hook


# @part hook input_grad
def save_input_grad(path):
    """Where a full backward hook cannot work (an in-place op): a forward pre-hook that puts Tensor.register_hook on
    each input tensor. It gets the gradient of the input tensor as a whole: where that tensor also feeds other
    modules, their share is included."""

    def hook(module, inputs):
        if not torch.is_grad_enabled():
            return
        call = next_call(path, "grad_input")
        leaves = list(tensor_leaves(inputs))
        if len(leaves) == 1 and leaves[0][0] == "0":
            leaves = [("", leaves[0][1])]
        for leaf, tensor in leaves:
            if tensor.requires_grad:
                tensor.register_hook(
                    lambda grad, leaf=leaf: keep("grad_input", path, call, leaf, grad) if grad is not None else None)

    return hook


# @part hook attention
# ---- attention weights (hookscope.core.engine.attention) ----------------------------------------------------------
attention_open = []  # the modes the attention pre-hooks entered, the innermost last


class AttentionMode(torch.overrides.TorchFunctionMode):
    """While it is entered, every torch function called goes through __torch_function__ first. Entered only inside
    one attention module's call (attention_hooks below), so the modules not hooked run as before. There it

    * computes scaled_dot_product_attention explicitly, softmax(Q K^T * scale + mask) @ V, keeping the weights: the
      fused kernel never forms them, and the model's output now goes through them (so they get a gradient);
    * keeps the output of a softmax over the last dimension of a 4-D tensor (eager attention), as computed;
    * asks nn.MultiheadAttention's multi_head_attention_forward for its per-head weights, and hands its caller
      what it asked for (no weights, or their mean over the heads)."""

    def __init__(self):
        super().__init__()
        self.kept = []  # (batch, heads, queries, keys) per attention computed in the module

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            return self.explicit(*args, **kwargs)
        if func is torch.nn.functional.multi_head_attention_forward:
            return self.multi_head(func, args, kwargs)
        output = func(*args, **kwargs)
        if func in (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if isinstance(output, torch.Tensor) and output.ndim == 4 and isinstance(dim, int) and dim in (-1, 3):
                self.kept.append(output)
        return output

    def multi_head(self, func, args, kwargs):
        import inspect

        bound = inspect.signature(func).bind(*args, **kwargs)
        bound.apply_defaults()
        wanted, average = bound.arguments["need_weights"], bound.arguments["average_attn_weights"]
        bound.arguments["need_weights"], bound.arguments["average_attn_weights"] = True, False
        output, weights = func(*bound.args, **bound.kwargs)
        self.kept.append(weights if weights.ndim == 4 else weights.unsqueeze(0))  # unbatched: (heads, L, S)
        if not wanted:
            return output, None
        return output, weights.mean(dim=-3) if average else weights

    def explicit(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
        weights = attention_weights(query, key, attn_mask, is_causal, scale, enable_gqa)
        self.kept.append(weights if weights.ndim == 4 else weights.unsqueeze(-3))
        if enable_gqa and value.ndim >= 3 and value.shape[-3] != query.shape[-3]:
            value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
        used = torch.nn.functional.dropout(weights, dropout_p) if dropout_p > 0 else weights
        return used @ value


def attention_weights(query, key, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """softmax(Q K^T * scale + mask) over the keys, as scaled_dot_product_attention defines it: a boolean mask keeps
    where True, a float mask is added, is_causal keeps the lower triangle, enable_gqa repeats the key heads."""
    import math

    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * factor
    if is_causal:
        causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.softmax(scores, dim=-1)


def attention_hooks(module, path):
    """register_forward_pre_hook enters an AttentionMode as the module starts; register_forward_hook(always_call=
    True) leaves it as the module ends (also when it raises) and keeps each attention's weights, with a tensor hook
    for their gradient ("PATH/grad"; "PATH/0", "PATH/0/grad"... where the module computes several)."""

    def enter(module, inputs):
        mode = AttentionMode()
        mode.__enter__()
        attention_open.append(mode)

    def leave(module, inputs, output):
        if not attention_open:
            return
        mode = attention_open.pop()
        mode.__exit__(None, None, None)
        call = next_call(path, "attention")
        for index, weights in enumerate(mode.kept):
            leaf = "" if len(mode.kept) == 1 else str(index)
            keep("attention", path, call, leaf, weights)
            # nn.MultiheadAttention returns a view of the weights it multiplied V with: the gradient reaches that
            # tensor, not the view.
            base = weights._base
            used = base if base is not None and base.numel() == weights.numel() else weights
            if torch.is_grad_enabled() and used.requires_grad:
                used.register_hook(
                    lambda grad, leaf=f"{leaf}/grad" if leaf else "grad", shape=weights.shape:
                    keep("attention", path, call, leaf, grad.reshape(shape)) if grad is not None else None)

    return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave, always_call=True)]


# @part edit zero
def zero_channels(channels):
    """An edit: a forward hook that returns a value replaces the module's output; these channels become 0."""

    def hook(module, inputs, output):
        edited = output.clone()  # a new tensor: never change the module's own output in place
        edited[:, channels] = 0
        return edited

    return hook


# @part edit keep
def keep_channels(channels):
    """An edit: a forward hook that returns a value replaces the module's output; every channel but these is 0."""

    def hook(module, inputs, output):
        others = torch.ones(output.shape[1], dtype=torch.bool, device=output.device)
        others[channels] = False
        edited = output.clone()
        edited[:, others] = 0
        return edited

    return hook


# @part edit scale
def scale_output(factor, channels=None):
    """An edit: a forward hook that returns the output scaled (some channels only, when given)."""

    def hook(module, inputs, output):
        if channels is None:
            return output * factor
        edited = output.clone()
        edited[:, channels] = edited[:, channels] * factor
        return edited

    return hook


# @part edit mix
mix_calls = {}  # (other image, path) -> calls blended so far


def mix_output(factor, mix_outputs, key):
    """An edit: factor * output + (1 - factor) * the same module's output on the other image (call k with call k)."""

    def hook(module, inputs, output):
        outputs = mix_outputs[key]
        other = outputs[mix_calls.get(key, 0) % len(outputs)]
        mix_calls[key] = mix_calls.get(key, 0) + 1
        return factor * output + (1 - factor) * other.to(output.device, output.dtype)

    return hook


# @part edit scale-input
def scale_input(factor):
    """An edit: a forward pre-hook that returns a tuple replaces the module's inputs."""

    def hook(module, inputs):
        return tuple(x * factor if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)

    return hook


# @part edit scale-grad
def scale_grad(factor):
    """An edit: a tensor hook that returns a tensor replaces the gradient; a forward hook puts it on the output."""

    def hook(module, inputs, output):
        if not torch.is_grad_enabled():
            return
        for _, tensor in tensor_leaves(output):
            if tensor.requires_grad:
                tensor.register_hook(lambda grad: grad * factor)

    return hook


# @part edit scale-grad-input
def scale_grad_input(factor):
    """An edit: a full backward hook that returns a tuple replaces grad_input, the gradient the module passes back."""

    def hook(module, grad_input, grad_output):
        return tuple(g * factor if g is not None else None for g in grad_input)

    return hook


# @part objective
# ---- the target --------------------------------------------------------------------------------------------------
TARGET = __TARGET__  # "top1", a class index, or a tuple: ("class", C), ("region", C, box), ("box", N), ("similar", IMAGE)
INPUT_SIZE = __INPUT_SIZE__  # (height, width) of the model's input
REFERENCE = None  # the embedding a similarity compares with, made in main() before the hooks


def class_scores(output):
    """The (1, K) class scores in an output: itself, its "logits" attribute or key, or the first of a tuple."""
    def is_scores(value):
        return isinstance(value, torch.Tensor) and value.ndim == 2 and value.shape[0] == 1 and value.shape[1] > 1

    if is_scores(output):
        return output
    logits = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    if is_scores(logits):
        return logits
    if isinstance(output, (tuple, list)) and output and is_scores(output[0]):
        return output[0]
    return None


def objective(output):
    """The number the gradients are of: a class's logit (top1: the highest logit, ties to the lowest index), or the
    sum of the output when it holds no class scores; for the other targets (a tuple), as Hookscope computes them."""
    if isinstance(TARGET, tuple):
        return objective_of(output, TARGET)
    scores = class_scores(output)
    if scores is None:
        total = sum(t.sum() for _, t in tensor_leaves(output) if t.is_floating_point())
        return total, None, "sum of the output"
    if TARGET == "top1":
        row = torch.nan_to_num(scores.detach()[0].to("cpu", torch.float64), nan=-torch.inf, posinf=torch.inf,
                               neginf=-torch.inf)
        index = int(torch.sort(row, descending=True, stable=True).indices[0])
        return scores[0, index], index, f"top-1 logit (class {index})"
    return scores[0, TARGET], TARGET, f"logit of class {TARGET}"


def objective_of(output, target):
    """A segmentation class's logits over its predicted pixels (as pytorch-grad-cam's SemanticSegmentationTarget)
    or over a region (x0, y0, x1, y1 of the input, pixels); a detection's score; the cosine similarity to an image's
    embedding."""
    kind = target[0]
    if kind in ("class", "region"):
        logits = output["out"] if isinstance(output, Mapping) and "out" in output else output.logits
        c = target[1]
        if kind == "region":
            x0, y0, x1, y1 = target[2]
            height, width = INPUT_SIZE
            sy, sx = logits.shape[2] / height, logits.shape[3] / width
            rows = slice(int(y0 * sy), max(int(y0 * sy) + 1, round(y1 * sy)))
            cols = slice(int(x0 * sx), max(int(x0 * sx) + 1, round(x1 * sx)))
            return logits[0, c, rows, cols].sum(), c, f"logits of class {c} over x {x0}-{x1}, y {y0}-{y1}"
        predicted = logits.detach()[0].argmax(dim=0)
        if c is None:  # top1: the class predicted on the most pixels, the background (class 0) aside if any other is
            counts = torch.bincount(predicted.flatten(), minlength=logits.shape[1])
            if counts[1:].sum() > 0:
                counts[0] = 0
            c = int(counts.argmax())
        mask = (predicted == c).to(logits.dtype)
        return (logits[0, c] * mask).sum(), c, f"logits of class {c} over its predicted pixels"
    if kind == "box":
        n = target[1]
        return output[0]["scores"][n], n, f"score of box {n}"
    embedding = output if isinstance(output, torch.Tensor) else output[0]
    return torch.nn.functional.cosine_similarity(embedding.reshape(1, -1), REFERENCE.reshape(1, -1))[0], None,         f"cosine similarity to {target[1]}"


# @part main
# ---- the run -----------------------------------------------------------------------------------------------------
OTHER_IMAGES = __OTHER_IMAGES__  # the images the mix edits blend in
MIXES = __MIXES__  # (other image, module path) of each mix edit


def fail(message):
    """One line on stderr and exit status 2, instead of a traceback, for what the user can fix."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=IMAGE, help="the image to run (default: the one Hookscope ran)")
    parser.add_argument("--device", default=__DEVICE__, help="cpu, cuda, cuda:N or mps")
    parser.add_argument("--save", metavar="FILE.npz", help="save every capture (and input, input_grad) to FILE.npz")
    args = parser.parse_args()
    if args.image is None:
        parser.error("this script has no image of its own: pass --image PATH")
    if args.save:  # before the slow part
        args.save = args.save if args.save.endswith(".npz") else args.save + ".npz"  # as np.savez names it
        folder = os.path.dirname(os.path.abspath(args.save))
        if not os.path.isdir(folder):
            fail(f"cannot save to {args.save!r}: the folder {folder!r} does not exist")
        if os.path.exists(args.save) and os.path.exists(args.image) and os.path.samefile(args.save, args.image):
            fail(f"cannot save to {args.save!r}: it is the image --image reads")
    device = device_or_fail(args.device)
    try:
        model = build_model().to(device)
    except OSError as error:  # a model or weights file moved or deleted since Hookscope wrote this script
        fail(f"cannot build the model: {error.strerror or error}: {error.filename!r}")
    x = preprocess(read_image_or_fail(args.image)).to(device)

    # A mix edit blends in the module's output on the other image: one pass without gradients, before any hook.
    mix_outputs = {}
    for other, path in MIXES:
        kept = mix_outputs.setdefault((other, path), [])
        handle = model.get_submodule(path).register_forward_hook(
            lambda module, inputs, output, kept=kept: kept.append(output.detach().clone()))
        with torch.no_grad():
            model(preprocess(read_image_or_fail(OTHER_IMAGES[other])).to(device))
        handle.remove()

    global REFERENCE
    if isinstance(TARGET, tuple) and TARGET[0] == "similar":  # the other image's embedding, before any hook
        with torch.no_grad():
            other = model(preprocess(read_image_or_fail(TARGET[1])).to(device))
        REFERENCE = (other if isinstance(other, torch.Tensor) else other[0]).detach()

    handles = register_hooks(model, mix_outputs)
    try:
        with torch.enable_grad():  # grad mode is per thread: on here, whatever the caller did
            xin = x.detach().clone().requires_grad_(True)
            output = model(xin)
            target, index, described = objective(output)
            # Only what leads to the input (and to hooked outputs off its path) is differentiated.
            grads = torch.autograd.grad(target, [xin, *grad_roots], allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
    input_grad = grads[0]
    scores = class_scores(output)
    print(f"{described}; output {tuple(scores.shape) if scores is not None else type(output).__name__}")
    for key, tensor in captured.items():
        print(f"{key}  {tuple(tensor.shape)}  sum={tensor.double().sum().item():.9g}")
    if args.save:
        arrays = {"input": x.detach().cpu().numpy()}
        if input_grad is not None:
            arrays["input_grad"] = input_grad.detach().cpu().numpy()
        arrays.update({key: tensor.numpy() for key, tensor in captured.items()})
        try:
            np.savez(args.save, **arrays)
        except OSError as error:  # a full disk, no permission: no half-written file left
            if os.path.isfile(args.save):
                os.remove(args.save)
            fail(f"cannot save to {args.save!r}: {error.strerror or error}")
        print(f"saved {len(captured)} captures to {args.save}")


def available_devices():
    """cpu always, then each CUDA device, then mps where present (as Hookscope lists them)."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def device_or_fail(spec):
    """The device --device names, checked as Hookscope checks it: one line when this machine does not have it."""
    name = spec.strip().lower()
    name = "cuda:0" if name == "cuda" else name
    available = available_devices()
    if name not in available:
        fail(f"device {spec!r} is not available on this machine; available: {', '.join(available)}")
    return torch.device(name)


def read_image_or_fail(path):
    try:
        return read_image(path)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        fail(f"cannot read the image {path!r}: {error}")


if __name__ == "__main__":
    main()
