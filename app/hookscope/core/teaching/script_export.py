"""A standalone Python script that redoes one Hookscope run in plain PyTorch: "Copy whole script" in the hook
inspector, and ``hookscope export ... --script OUT.py``.

The script needs torch, torchvision, Pillow and numpy (and whatever the model itself needs), never Hookscope. It
builds the same model with the same weights (``torch.manual_seed(seed)`` before construction for random weights;
the same file for a state_dict, a pickled model or a ``model.py`` factory), reads the same image with the same
preprocessing (resize, centre crop, mean and std, channels), registers exactly the hooks and edits in use (each
with the PyTorch method the engine used: a tensor hook for the Grad column, a full backward hook for grad_input
and ``--hooks grad_out``, or tensor hooks where that cannot work), runs forward and backward to the same target,
prints one line per capture (key, shape, sum) and, with
``--save FILE.npz``, saves the captures under the export's keys: ``activations/KEY``, ``inputs/KEY``,
``gradients/KEY``, ``output_gradients/KEY``... (``hookscope.core.outputs.export.ARCHIVES``, the vocabulary's names: the
archive's name without ``.npz``,
then the key inside it) plus ``input`` and ``input_grad``. A test runs the script in a fresh process and compares
with the export.

Every hook function in the script does what ``hookscope.core.engine.hooks`` and ``hookscope.core.engine.interventions`` do, written out;
an Attn tick's pair of hooks and its torch function mode are ``hookscope.core.engine.attention``'s. The attention rollout
maps (``attention_rollout.npz``) are not recomputed: they follow from the weights saved.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hookscope.core.common.errors import HookscopeError, Remedy
from hookscope.core.engine.hooks import FALLBACK, FORWARD, FULL_BACKWARD, PRE, TENSOR, HookRegistry
from hookscope.core.engine.interventions import Intervention
from hookscope.core.engine.target_words import Target, parse_target
from hookscope.core.models.files import split_factory
from hookscope.core.models.images import Preprocess
from hookscope.core.models.loaded import TIMM_PREFIX, LoadedModel
from hookscope.core.outputs.export import ARCHIVES as EXPORT_ARCHIVES
from hookscope.core.teaching.snippets import module_expression, one_line

# The script's fixed parts (Python files, so that ruff checks them), read as text: each runs from a "# @part NAME"
# line to the next; "__NAME__" marks a value the writer fills in.
TEMPLATES = Path(__file__).with_name("script_templates") / "standalone.py"
_PART = re.compile(r"^# @part (\S+(?: \S+)?)$", re.MULTILINE)
_SLOT = re.compile(r"__([A-Z][A-Z_]*)__")


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
        """Which of the script's hook functions registers it (its template part is "hook CODE")."""
        if self.kind == "attention":
            return "attention"
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
                "A script cannot redo a text: target: the text tower is a Hugging Face model's, which a script does "
                "not rebuild",
                remedy=Remedy.EXPORT_INSTEAD,
            )
        # "top1", a class index (as before), or the objective's parts: ("class", C) for a segmentation model's
        # class, ("region", C, (x0, y0, x1, y1)), ("box", N), ("similar", IMAGE)
        segmentation = loaded.task == "segmentation"
        self.target: str | int | tuple[Any, ...] = (
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
        crop = self.loaded.preprocess.crop
        parts = [
            self._header(),
            template_part("imports"),
            self._model(),
            self._image(),
            self._capture(),
            *_chosen("hook", self.codes),  # in the templates' order
            *_chosen("edit", self.edit_kinds),
            self._register(),
            template_part("objective", TARGET=repr(self.target), INPUT_SIZE=repr((crop, crop))),
            self._main(),
        ]
        return "\n\n".join(part.strip("\n") for part in parts if part) + "\n"

    # ---- the docstring ------------------------------------------------------------------------------------------
    def _header(self) -> str:
        from hookscope._version import __version__

        counts: dict[str, int] = {}
        for hook in self.hooks:
            counts[hook.kind] = counts.get(hook.kind, 0) + 1
        listed = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none"
        edits = "; ".join(e.spec for e in self.edits) or "none"
        if isinstance(self.target, tuple):
            target = f"the objective {parse_target_words(self.target)}"
        elif isinstance(self.target, int):
            target = f"the logit of class {self.target}"
        else:  # "top1"
            target = "the top-1 class's logit (or the sum of the output when it holds no class scores)"
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
            f"of `hookscope export` ({', '.join(f'{EXPORT_ARCHIVES[k][:-4]}/KEY' for k in ('forward', 'pre', 'tensor'))}"
            "...: the archive's name, then",
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
    # long because: the script's model part, one branch per kind of model source, in the order the written script reads
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
                from hookscope.core.models.catalogue import _timm_cached_weights

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
            lines += ["", "", template_part("unwrap")]
        if weights_file is not None:
            lines += ["", "", template_part("load_weights")]
        return "\n".join(lines)

    # ---- the image ----------------------------------------------------------------------------------------------
    def _image(self) -> str:
        p = self.loaded.preprocess
        return template_part(
            "image",
            IMAGE=repr(self.image),
            RESIZE=repr(p.resize),
            CROP=repr(p.crop),
            MEAN=repr(list(p.mean)),
            STD=repr(list(p.std)),
            CHANNELS=repr(p.channels),
            INTERPOLATION=repr(p.interpolation),
        )

    def _capture(self) -> str:
        # The archive names of ``hookscope export`` (without ".npz"), so that --save writes the export's keys.
        archives = {kind: name.removesuffix(".npz") for kind, name in EXPORT_ARCHIVES.items()}
        return template_part("capture", ARCHIVES=repr(archives))

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
            if hook.kind == "attention":  # two hooks: a pre-hook and a forward hook around a torch function mode
                lines.append(f"    handles.extend(attention_hooks({_on(hook.path)}, {hook.path!r}))")
                continue
            lines.append(f"    handles.append({_on(hook.path)}.{_hook_registration(hook)})")
        lines.append("    return handles")
        return "\n".join(lines)

    # ---- main ---------------------------------------------------------------------------------------------------
    def _main(self) -> str:
        others = {e.other_image: _absolute(e.other_image) for e in self.mixes if e.other_image}
        mixes = sorted({(e.other_image, e.path) for e in self.mixes if e.other_image})
        return template_part("main", DEVICE=repr(self.device), OTHER_IMAGES=repr(others), MIXES=repr(mixes))


# ---- the templates ---------------------------------------------------------------------------------------------------
@cache
def template_parts() -> dict[str, str]:
    """The script's fixed parts by name, in the order of ``TEMPLATES`` (the stand-ins, part "-", left out)."""
    pieces = _PART.split(TEMPLATES.read_text(encoding="utf-8"))  # the file's docstring, then name, text, name...
    return {name: text.strip("\n") for name, text in zip(pieces[1::2], pieces[2::2]) if name != "-"}


def template_part(name: str, **values: str) -> str:
    """One part with each ``__NAME__`` replaced by ``values[NAME]`` (Python source: a repr)."""

    def fill(slot: re.Match[str]) -> str:
        if slot.group(1) not in values:
            raise KeyError(f"The script part '{name}' has a value to fill in, __{slot.group(1)}__, and none was given.")
        return values[slot.group(1)]

    return _SLOT.sub(fill, template_parts()[name])


def _chosen(group: str, names: set[str]) -> list[str]:
    """The parts "GROUP NAME" for ``names`` (the hook functions or edits in use), in the templates' order."""
    prefix = f"{group} "
    return [
        template_part(part) for part in template_parts() if part.startswith(prefix) and part[len(prefix) :] in names
    ]


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
