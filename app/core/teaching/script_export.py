"""A standalone Python script that redoes one Hookscope run in plain PyTorch: "Copy whole script" in the hook
inspector, and ``hookscope export ... --script OUT.py``.

The script needs torch, torchvision, Pillow and numpy (and whatever the model itself needs), never Hookscope. It
builds the same model with the same weights (``torch.manual_seed(seed)`` before construction for random weights;
the same file for a state_dict, a pickled model or a ``model.py`` factory), reads the same image with the same
preprocessing (resize, centre crop, mean and std, channels), registers exactly the hooks and edits in use (each
with the PyTorch method the engine used: a tensor hook for the Grad column, a full backward hook for grad_input
and ``--hooks backward``, or tensor hooks where that cannot work), runs forward and backward to the same target,
prints one line per capture (key, shape, sum) and, with
``--save FILE.npz``, saves the captures under the export's keys: ``activations/KEY``, ``inputs/KEY``,
``gradients/KEY``, ``tensor_gradients/KEY``... (``app.core.outputs.export.ARCHIVES``: the archive's name without ``.npz``,
then the key inside it) plus ``input`` and ``input_grad``. A test runs the script in a fresh process and compares
with the export.

Every hook function in the script does what ``app.core.engine.hooks`` and ``app.core.engine.interventions`` do, written out.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

from app.core.common.errors import HookscopeError
from app.core.engine.hooks import FALLBACK, FORWARD, FULL_BACKWARD, PRE, TENSOR, HookRegistry
from app.core.engine.interventions import Intervention
from app.core.engine.objectives import parse_target
from app.core.models.catalogue import TIMM_PREFIX, LoadedModel
from app.core.models.files import split_factory
from app.core.models.images import Preprocess
from app.core.outputs.export import ARCHIVES as EXPORT_ARCHIVES
from app.core.teaching.snippets import module_expression, one_line

Target = int | str


@dataclass(frozen=True)
class ScriptHook:
    """One capture hook as the script registers it."""

    path: str
    kind: str  # forward, pre, backward, tensor, grad_input
    method: str  # the PyTorch method the engine used (FORWARD, PRE, FULL_BACKWARD, TENSOR or FALLBACK)
    note: str = ""
    calls: int = 1  # how often the module runs per forward pass (full backward hooks number their calls from it)
    tuple_output: bool = False  # a full backward hook names grad_output's entries "0", "1"... for a tuple output
    clone_view: bool = False  # a view output changed in place later: the tensor hook goes on a copy (see hooks.py)

    @property
    def code(self) -> str:
        """Which of the script's hook functions registers it (a key of ``HOOK_CODE``)."""
        if self.kind == "grad_input":
            return "input_grad" if self.method == FALLBACK else "grad_input"
        if self.method in (TENSOR, FALLBACK):
            return "output_grad"
        return {FORWARD: "forward", PRE: "pre", FULL_BACKWARD: "grad_output"}.get(self.method, self.method)


def script_hooks(registry: HookRegistry) -> tuple[list[ScriptHook], list[Intervention]]:
    """The capture hooks (with what the last run's survey knows of their modules) and the enabled edits, in the
    order their hooks were registered."""
    survey = registry.survey
    hooks: list[ScriptHook] = []
    edits: list[Intervention] = []
    for info in registry.live_hooks():
        if info.edit_id is not None:
            edits.append(registry.edit(info.edit_id))
            continue
        run = survey.run_of(info.path) if survey is not None else None
        hooks.append(ScriptHook(
            info.path, info.kind, info.method, info.note,
            calls=max(run.calls, 1) if run is not None else 1,
            tuple_output=run is not None and run.output_form == "tuple",
            clone_view=run is not None and run.output_modified_later,
        ))  # fmt: skip
    return hooks, edits


def standalone_script(
    loaded: LoadedModel,
    registry: HookRegistry,
    *,
    image: str | os.PathLike | None,
    target: Target = "top1",
    device: str = "cpu",
    what: str = "",
) -> str:
    """The script for ``loaded`` with ``registry``'s hooks and edits, run on ``image`` (None: the script asks for
    ``--image``), differentiating ``target`` ("top1" or a class index), on ``device``. ``what`` says where it came
    from ("hookscope export ...", "the window"), for its docstring."""
    hooks, edits = script_hooks(registry)
    return _Writer(loaded, hooks, edits, image, target, device, what).script()


# =====================================================================================================================
class _Writer:
    def __init__(
        self,
        loaded: LoadedModel,
        hooks: list[ScriptHook],
        edits: list[Intervention],
        image: str | os.PathLike | None,
        target: Target,
        device: str,
        what: str,
    ) -> None:
        self.loaded = loaded
        self.hooks = hooks
        self.edits = edits
        self.image = _absolute(image) if image is not None else None
        objective = parse_target(target)
        if objective.kind == "text":
            raise HookscopeError(
                "--script cannot write a text: target: the text tower is a Hugging Face model's, "
                "which a script does not rebuild; use export without --script."
            )
        # "top1", a class index (as before), or the objective's parts: ("class", C) for a segmentation model's
        # class, ("region", C, (x0, y0, x1, y1)), ("box", N), ("similar", IMAGE)
        segmentation = loaded.task == "segmentation"
        self.target: object = (
            ("class", None)
            if segmentation and objective.kind == "top1"
            else "top1"
            if objective.kind == "top1"
            else (
                int(objective.index or 0)
                if objective.kind == "class" and loaded.task != "segmentation"
                else ("class", objective.index)
                if objective.kind == "class"
                else ("region", objective.index, objective.region)
                if objective.kind == "region"
                else ("box", objective.index)
                if objective.kind == "box"
                else ("similar", _absolute(objective.image or ""))
            )
        )
        self.device = device
        self.what = what
        self.codes = {h.code for h in hooks}
        self.edit_kinds = {e.kind for e in edits}
        self.mixes = [e for e in edits if e.kind == "mix"]

    def script(self) -> str:
        parts = [
            self._header(),
            IMPORTS,
            self._model(),
            self._image(),
            self._capture(),
            *[code for name, code in HOOK_CODE.items() if name in self.codes],
            *[EDIT_CODE[kind] for kind in EDIT_ORDER if kind in self.edit_kinds],
            self._register(),
            OBJECTIVE.replace("{{TARGET}}", repr(self.target)).replace(
                "{{INPUT_SIZE}}", repr((self.loaded.preprocess.crop, self.loaded.preprocess.crop))
            ),
            self._main(),
        ]
        return "\n\n".join(part.strip("\n") for part in parts if part) + "\n"

    # ---- the docstring ------------------------------------------------------------------------------------------
    def _header(self) -> str:
        from app import __version__

        counts: dict[str, int] = {}
        for hook in self.hooks:
            counts[hook.kind] = counts.get(hook.kind, 0) + 1
        listed = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none"
        edits = "; ".join(e.spec for e in self.edits) or "none"
        target = (
            "the top-1 class's logit (or the sum of the output when it holds no class scores)"
            if self.target == "top1"
            else f"the logit of class {self.target}"
            if isinstance(self.target, int)
            else f"the objective {parse_target_words(self.target)}"
        )
        lines = [
            '"""What Hookscope ran, redone in plain PyTorch: the same model, image, preprocessing, hooks and edits.',
            "",
            f"Generated by Hookscope {__version__} on {datetime.date.today().isoformat()}"
            + (f" from {_doc(self.what)}" if self.what else "")
            + ".",
            f"Model: {_doc(self._model_words())}.",
            f"Image: {_doc(self.image or 'none saved (pixels pasted into the window): pass --image PATH')}.",
            f"Preprocessing: {_preprocess_words(self.loaded.preprocess)}.",
            f"Hooks: {listed}. Edits: {_doc(edits)}.",
            f"Gradients of {target}.",
            "",
            "Needs torch, torchvision, Pillow and numpy, not Hookscope. Run it as",
            "    python THIS_FILE.py [--image PATH] [--device cpu] [--save captures.npz]",
            "It prints one line per capture (key, shape, sum); --save writes every capture to an .npz under the keys",
            "of `hookscope export` (activations/KEY, inputs/KEY, tensor_gradients/KEY...: the archive's name, then",
            "the key in it; ARCHIVES below), plus input and input_grad.",
            '"""',
        ]
        return "\n".join(lines)

    def _model_words(self) -> str:
        loaded = self.loaded
        if loaded.source in ("catalogue", "timm", "state_dict"):
            name = loaded.name
            if loaded.source == "state_dict":
                return f"{name}, weights from {_absolute(loaded.model_file)}"
            if loaded.weights == "none" or not loaded.pretrained:
                return f"{name}, random weights drawn after torch.manual_seed({loaded.seed})"
            if loaded.weights == "default":
                return f"{name}, pretrained weights from the cache"
            return f"{name}, weights from {_absolute(loaded.weights)}"
        file, factory = split_factory(loaded.model_file)
        if loaded.source == "pickle":
            return f"the model pickled in {_absolute(file)}"
        return f"built by {factory}() in {_absolute(file)} after torch.manual_seed({loaded.seed})"

    # ---- the model ----------------------------------------------------------------------------------------------
    def _model(self) -> str:
        loaded = self.loaded
        weights_file = None
        lines = ["# ---- the model ----------------------------------------------------------------------------------"]
        if loaded.source in ("catalogue", "state_dict"):
            pretrained = loaded.source == "catalogue" and loaded.weights == "default" and loaded.pretrained
            if loaded.source == "state_dict":
                weights_file = _absolute(loaded.model_file)
            elif loaded.weights not in ("none", "default"):
                weights_file = _absolute(loaded.weights)
            lines += [
                f"SEED = {loaded.seed}",
                "",
                "",
                "def build_model():",
            ]
            if pretrained:
                lines += [
                    "    # torchvision's default pretrained weights (from the torch hub cache, where Hookscope found them)",
                    f'    model = torchvision.models.get_model({loaded.name!r}, weights="DEFAULT")',
                ]
            else:
                lines += [
                    "    torch.manual_seed(SEED)  # random weights: the same seed before construction, the same weights",
                    f"    model = torchvision.models.get_model({loaded.name!r}, weights=None"
                    + (", weights_backbone=None)" if loaded.task != "classification" else ")"),
                ]
        elif loaded.source == "timm":
            arch = loaded.name[len(TIMM_PREFIX) :]
            lines += [
                f"SEED = {loaded.seed}",
                "",
                "",
                "def build_model():",
                "    import timm",
                "",
                "    torch.manual_seed(SEED)",
            ]
            if loaded.weights == "default" and loaded.pretrained:
                from app.core.models.catalogue import _timm_cached_weights

                cached = _timm_cached_weights(arch)
                overlay = f", pretrained_cfg_overlay={{'file': {str(cached)!r}}}" if cached else ""
                lines.append(f"    model = timm.create_model({arch!r}, pretrained=True{overlay})")
            else:
                lines.append(f"    model = timm.create_model({arch!r}, pretrained=False)")
                if loaded.weights not in ("none", "default"):
                    weights_file = _absolute(loaded.weights)
        elif loaded.source in ("pickle", "python"):
            file, factory = split_factory(loaded.model_file)
            if loaded.weights not in ("", "none", "default") and _absolute(loaded.weights) != _absolute(file):
                weights_file = _absolute(loaded.weights)
            lines += [f"MODEL_FILE = {_absolute(file)!r}"]
            if loaded.source == "python":
                lines += [
                    f"FACTORY = {factory!r}",
                    f"SEED = {loaded.seed}",
                    "",
                    "",
                    "def build_model():",
                    "    # Runs the code in MODEL_FILE, as Hookscope did once you trusted it.",
                    "    import importlib.util",
                    "    import sys",
                    "",
                    '    spec = importlib.util.spec_from_file_location("hookscope_model", MODEL_FILE)',
                    "    code = importlib.util.module_from_spec(spec)",
                    "    sys.path.insert(0, os.path.dirname(MODEL_FILE))  # so that it can import its neighbours",
                    '    sys.modules["hookscope_model"] = code',
                    "    spec.loader.exec_module(code)",
                    "    target = code",
                    '    for part in FACTORY.split("."):',
                    "        target = getattr(target, part)",
                    "    torch.manual_seed(SEED)  # the factory's random weights: the same seed, the same weights",
                    "    model = target if isinstance(target, torch.nn.Module) else target()",
                    "    model = unwrap(model).cpu()",
                ]
            else:
                lines += [
                    "",
                    "",
                    "def build_model():",
                    "    # Unpickling runs code named in the file, as Hookscope did once you trusted it.",
                    '    data = torch.load(MODEL_FILE, map_location="cpu", weights_only=False)',
                    "    if not isinstance(data, torch.nn.Module):  # a checkpoint holding the model",
                    f"        data = next(data[k] for k in {('model', 'module', 'net', 'network', 'model_ema', 'ema')!r}",
                    "                    if isinstance(data.get(k), torch.nn.Module))",
                    "    model = unwrap(data).cpu()",
                ]
        else:
            raise HookscopeError(f"A script cannot rebuild a model from '{loaded.source}'.")
        if weights_file is not None:
            lines += [f"    load_weights(model, {weights_file!r})"]
        lines += ["    return model.eval()"]
        if loaded.source in ("pickle", "python"):
            lines += ["", "", UNWRAP.strip("\n")]
        if weights_file is not None:
            lines += ["", "", LOAD_WEIGHTS.strip("\n")]
        return "\n".join(lines)

    # ---- the image ----------------------------------------------------------------------------------------------
    def _image(self) -> str:
        p = self.loaded.preprocess
        constants = [
            f"IMAGE = {self.image!r}",
            f"RESIZE = {p.resize!r}  # the shorter side, in pixels (None: no resize)",
            f"CROP = {p.crop!r}  # the centre crop",
            f"MEAN = {list(p.mean)!r}",
            f"STD = {list(p.std)!r}",
            f"CHANNELS = {p.channels!r}",
            f"INTERPOLATION = {p.interpolation!r}",
        ]
        return IMAGE_CODE.replace("{{CONSTANTS}}", "\n".join(constants))

    def _capture(self) -> str:
        # The archive names of ``hookscope export`` (without ".npz"), so that --save writes the export's keys.
        archives = {kind: name.removesuffix(".npz") for kind, name in EXPORT_ARCHIVES.items()}
        return CAPTURE.replace("{{ARCHIVES}}", repr(archives))

    # ---- registering --------------------------------------------------------------------------------------------
    def _register(self) -> str:
        lines = [
            "# ---- the hooks, registered on the live model ------------------------------------------------------",
            "def register_hooks(model, mix_outputs):",
            '    """Every hook and edit Hookscope had on the model; returns their handles (h.remove() takes one off)."""',
            "    handles = []",
        ]
        if self.edits:
            lines.append(
                "    # Edits first, each with prepend=True: they run before the reading hooks of their module, so"
            )
            lines.append("    # those see the edited values (the last one registered runs first, as in Hookscope).")
        for edit in self.edits:
            lines.append(f"    # {one_line(edit.describe())}")
            lines.append(f"    handles.append({_on(edit.path)}.{_edit_registration(edit)})")
        if self.hooks:
            lines.append("    # The reading hooks.")
        for hook in self.hooks:
            if hook.note:
                lines.append(f"    # {one_line(hook.note)}")
            lines.append(f"    handles.append({_on(hook.path)}.{_hook_registration(hook)})")
        lines.append("    return handles")
        return "\n".join(lines)

    # ---- main ---------------------------------------------------------------------------------------------------
    def _main(self) -> str:
        others = {e.other_image: _absolute(e.other_image) for e in self.mixes if e.other_image}
        mixes = sorted({(e.other_image, e.path) for e in self.mixes if e.other_image})
        return (
            MAIN.replace("{{DEVICE}}", repr(self.device))
            .replace("{{OTHERS}}", repr(others))
            .replace("{{MIXES}}", repr(mixes))
        )


# ---- registration lines ---------------------------------------------------------------------------------------------
def _doc(text: str) -> str:
    """Text for the script's docstring: backslashes and quotes escaped (a path holding \"\"\" cannot end it), one
    line."""
    return one_line(text.replace("\\", "\\\\").replace('"', '\\"'))


def _on(path: str) -> str:
    return module_expression(path)


def _hook_registration(hook: ScriptHook) -> str:
    path = repr(hook.path)
    if hook.method == FORWARD:
        return f"register_forward_hook(save_output({path}))"
    if hook.method == PRE:
        return f"register_forward_pre_hook(save_input({path}), with_kwargs=True)"
    if hook.code == "grad_input":
        return f"register_full_backward_hook(save_grad_input({path}, calls={hook.calls}))"
    if hook.code == "input_grad":
        return f"register_forward_pre_hook(save_input_grad({path}))"
    if hook.method == FULL_BACKWARD:
        return (
            f"register_full_backward_hook(save_grad_output({path}, calls={hook.calls}, "
            f"tuple_output={hook.tuple_output}))"
        )
    if hook.method in (TENSOR, FALLBACK):
        extra = ", clone_view=True" if hook.clone_view else ""
        return f"register_forward_hook(save_output_grad({path}, {hook.kind!r}{extra}))"
    raise HookscopeError(f"A script cannot register a hook of method '{hook.method}'.")


def _edit_registration(edit: Intervention) -> str:
    path, factor, channels = repr(edit.path), repr(edit.factor), repr(list(edit.channels))
    if edit.kind == "zero":
        return f"register_forward_hook(zero_channels({channels}), prepend=True)"
    if edit.kind == "keep":
        return f"register_forward_hook(keep_channels({channels}), prepend=True)"
    if edit.kind == "scale":
        return f"register_forward_hook(scale_output({factor}, {channels if edit.channels else None}), prepend=True)"
    if edit.kind == "mix":
        return f"register_forward_hook(mix_output({factor}, mix_outputs, ({edit.other_image!r}, {path})), prepend=True)"
    if edit.kind == "scale-input":
        return f"register_forward_pre_hook(scale_input({factor}), prepend=True)"
    if edit.kind == "scale-grad":
        return f"register_forward_hook(scale_grad({factor}), prepend=True)"
    if edit.kind == "scale-grad-input":
        return f"register_full_backward_hook(scale_grad_input({factor}), prepend=True)"
    raise HookscopeError(f"A script cannot register an edit of kind '{edit.kind}'.")


def _absolute(path: str | os.PathLike) -> str:
    return os.path.abspath(os.fspath(path))


def parse_target_words(target: tuple) -> str:
    """The docstring's words for a target tuple (``_Writer.target``)."""
    if target[0] == "class" and target[1] is None:
        return "top1 (the class predicted on the most pixels: its logits over them)"
    if target[0] == "class":
        return f"class:{target[1]} (its logits over its predicted pixels)"
    if target[0] == "region":
        return f"class:{target[1]}@" + ",".join(str(v) for v in target[2]) + " (its logits over that region)"
    if target[0] == "box":
        return f"box:{target[1]} (the score of detection {target[1]})"
    return f"similar:{target[1]} (the cosine similarity of the embeddings)"


def _preprocess_words(p: Preprocess) -> str:
    resize = f"shorter side resized to {p.resize} ({p.interpolation}, antialiased), " if p.resize else ""
    return (
        f"{'grayscale' if p.channels == 1 else 'RGB'}, {resize}centre crop {p.crop}x{p.crop}, "
        f"mean {list(p.mean)}, std {list(p.std)}"
    )


# =====================================================================================================================
# The script's fixed parts. Each mirrors an engine function; the comments say which.

IMPORTS = """
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
"""

UNWRAP = '''
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
'''

LOAD_WEIGHTS = '''
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
'''

IMAGE_CODE = '''
# ---- the image, as the model sees it -----------------------------------------------------------------------------
{{CONSTANTS}}
MAX_RESIZED_ASPECT = 8  # a very wide or tall picture has only the part the crop keeps resized (same pixels)


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
'''

CAPTURE = '''
# ---- what the hooks keep -----------------------------------------------------------------------------------------
ARCHIVES = {{ARCHIVES}}
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
'''

# The hook functions, by ``ScriptHook.code``; each is written into the script only when a hook uses it.
HOOK_CODE = {
    "forward": '''
def save_output(path):
    """register_forward_hook: fn(module, inputs, output) runs after the module; it keeps the output (a copy: a later
    in-place operation, such as ResNet's ReLU(inplace=True), would change it)."""

    def hook(module, inputs, output):
        call = next_call(path, "forward")
        for leaf, tensor in tensor_leaves(output):
            keep("forward", path, call, leaf, tensor)

    return hook
''',
    "pre": '''
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
''',
    "grad_output": '''
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
''',
    "output_grad": '''
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
''',
    "grad_input": '''
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
''',
    "input_grad": '''
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
''',
}

EDIT_ORDER = ("zero", "keep", "scale", "mix", "scale-input", "scale-grad", "scale-grad-input")
EDIT_CODE = {
    "zero": '''
def zero_channels(channels):
    """An edit: a forward hook that returns a value replaces the module's output; these channels become 0."""

    def hook(module, inputs, output):
        edited = output.clone()  # a new tensor: never change the module's own output in place
        edited[:, channels] = 0
        return edited

    return hook
''',
    "keep": '''
def keep_channels(channels):
    """An edit: a forward hook that returns a value replaces the module's output; every channel but these is 0."""

    def hook(module, inputs, output):
        others = torch.ones(output.shape[1], dtype=torch.bool, device=output.device)
        others[channels] = False
        edited = output.clone()
        edited[:, others] = 0
        return edited

    return hook
''',
    "scale": '''
def scale_output(factor, channels=None):
    """An edit: a forward hook that returns the output scaled (some channels only, when given)."""

    def hook(module, inputs, output):
        if channels is None:
            return output * factor
        edited = output.clone()
        edited[:, channels] = edited[:, channels] * factor
        return edited

    return hook
''',
    "mix": '''
mix_calls = {}  # (other image, path) -> calls blended so far


def mix_output(factor, mix_outputs, key):
    """An edit: factor * output + (1 - factor) * the same module's output on the other image (call k with call k)."""

    def hook(module, inputs, output):
        outputs = mix_outputs[key]
        other = outputs[mix_calls.get(key, 0) % len(outputs)]
        mix_calls[key] = mix_calls.get(key, 0) + 1
        return factor * output + (1 - factor) * other.to(output.device, output.dtype)

    return hook
''',
    "scale-input": '''
def scale_input(factor):
    """An edit: a forward pre-hook that returns a tuple replaces the module's inputs."""

    def hook(module, inputs):
        return tuple(x * factor if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)

    return hook
''',
    "scale-grad": '''
def scale_grad(factor):
    """An edit: a tensor hook that returns a tensor replaces the gradient; a forward hook puts it on the output."""

    def hook(module, inputs, output):
        if not torch.is_grad_enabled():
            return
        for _, tensor in tensor_leaves(output):
            if tensor.requires_grad:
                tensor.register_hook(lambda grad: grad * factor)

    return hook
''',
    "scale-grad-input": '''
def scale_grad_input(factor):
    """An edit: a full backward hook that returns a tuple replaces grad_input, the gradient the module passes back."""

    def hook(module, grad_input, grad_output):
        return tuple(g * factor if g is not None else None for g in grad_input)

    return hook
''',
}

OBJECTIVE = '''
# ---- the target --------------------------------------------------------------------------------------------------
TARGET = {{TARGET}}  # "top1", a class index, or a tuple: ("class", C), ("region", C, box), ("box", N), ("similar", IMAGE)
INPUT_SIZE = {{INPUT_SIZE}}  # (height, width) of the model's input
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
            return logits[0, c, rows, cols].sum(), c, f"logits of class {c} over {x0},{y0},{x1},{y1}"
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
    return torch.nn.functional.cosine_similarity(embedding.reshape(1, -1), REFERENCE.reshape(1, -1))[0], None, \
        f"cosine similarity to {target[1]}"
'''

MAIN = '''
# ---- the run -----------------------------------------------------------------------------------------------------
OTHER_IMAGES = {{OTHERS}}  # the images the mix edits blend in
MIXES = {{MIXES}}  # (other image, module path) of each mix edit


def fail(message):
    """One line on stderr and exit status 2, instead of a traceback, for what the user can fix."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=IMAGE, help="the image to run (default: the one Hookscope ran)")
    parser.add_argument("--device", default={{DEVICE}}, help="cpu, cuda, cuda:N or mps")
    parser.add_argument("--save", metavar="FILE.npz", help="save every capture (and input, input_grad) to FILE.npz")
    args = parser.parse_args()
    if args.image is None:
        parser.error("this script has no image of its own: pass --image PATH")
    if args.save:  # before the slow part
        args.save = args.save if args.save.endswith(".npz") else args.save + ".npz"  # as np.savez names it
        folder = os.path.dirname(os.path.abspath(args.save))
        if not os.path.isdir(folder):
            fail(f"cannot save to {args.save!r}: the folder {folder!r} does not exist")
    device = torch.device(args.device)
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


def read_image_or_fail(path):
    try:
        return read_image(path)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        fail(f"cannot read the image {path!r}: {error}")


if __name__ == "__main__":
    main()
'''


def check_script_path(path: str | os.PathLike) -> str:
    """Where ``--script`` writes, checked before the slow part: a one-line error for a folder or a missing folder."""
    text = os.fspath(path)
    if os.path.isdir(text):
        raise HookscopeError(
            f"Cannot write the script to '{text}': it is a folder; give a file name such as run.py.", path=text
        )
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise HookscopeError(f"Cannot write the script to '{text}': the folder '{folder}' does not exist.", path=text)
    return text


def write_script(path: str | os.PathLike, script: str) -> None:
    """Write ``script`` to ``path`` (executable where that means something); a one-line error when it cannot."""
    text = os.fspath(path)
    try:
        with open(text, "w", encoding="utf-8") as handle:
            handle.write(script)
        os.chmod(text, 0o755)
    except OSError as error:
        raise HookscopeError(f"Cannot write the script to '{text}' ({error.strerror or error}).", path=text) from error
