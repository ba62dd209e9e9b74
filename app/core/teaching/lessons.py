"""Lessons: PyTorch's four hooks taught on the user's own model, each one registered for real, run and checked.

A :class:`Lesson` says in two or three sentences what its hook receives, what returning a value does and its
pitfall; :meth:`Lesson.run` registers real hooks on the model, runs it, and returns a :class:`LessonResult`: the
numbers before and after side by side, the claim and whether the run reproduced it, and the plain PyTorch that
does the same (runnable on its own). Every handle a lesson registers is removed before ``run`` returns, also when
it raises; ``LessonResult.handles_left`` counts any that were not (always 0 unless PyTorch misbehaves).

Lessons that need exact small numbers (2 x 1.6 = 3.2) run on a tiny built-in network; the others on the model and
image they are given, on the modules :func:`plan` picks from a survey of that model. Where the model has no
module a lesson needs (no in-place op after any module, no container), the lesson runs on a small built-in
convolutional network instead and says so in ``LessonResult.note``.

Where a lesson is one of Hookscope's own ticks or edits, it uses them (``HookRegistry``, ``capture_run``,
``Intervention``, the inspector's snippets), and :meth:`Lesson.setup` names them, so that the window can register
the same hooks through its workspace, where the hook inspector lists them.
"""

from __future__ import annotations

import keyword
import math
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from app.core.common.errors import HookscopeError
from app.core.engine.blame import model_pass
from app.core.engine.capture import RunResult, _objective, capture_run
from app.core.engine.hooks import FORWARD, FULL_BACKWARD, PRE, TENSOR, HookInfo, HookRegistry
from app.core.engine.interventions import Intervention
from app.core.engine.tree import ModelSurvey, ModuleRun, survey
from app.core.teaching.snippets import captured_key, edit_snippet, hook_snippet, literal, module_expression, one_line

MIX_WEIGHT = 0.7  # manifold mixup: 0.7 A + 0.3 B
OTHER = "B"  # the name the mix edit knows image B by
TINY_INPUT = 1.0
TINY_WEIGHT = 2.0


# ---- what a lesson returns ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One line of numbers: a label and the two values shown side by side (text, already formatted)."""

    label: str
    left: str
    right: str


@dataclass
class LessonResult:
    """What one run of a lesson showed, and whether it reproduced the lesson's claim."""

    lesson: str  # the lesson's id
    ok: bool
    claim: str  # what was checked, in words, with the numbers
    summary: str  # the numbers in one short line (the command line prints it)
    columns: tuple[str, str]  # the headings of Row.left and Row.right
    rows: list[Row]
    snippet: str  # plain PyTorch that does the same, runnable on its own
    paths: dict[str, str] = field(default_factory=dict)  # the modules used, by role
    note: str = ""  # e.g. why the built-in network was used
    warnings: list[str] = field(default_factory=list)  # what PyTorch warned about during the run
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # the raw values behind the rows, on the CPU
    handles_left: int = 0  # handles this lesson registered that are still on a module (must be 0)
    error: str = ""  # the error that stopped the lesson, if one did

    @property
    def status(self) -> str:
        return "ok" if self.ok else "failed"


@dataclass(frozen=True)
class AppSetup:
    """The lesson as Hookscope's own ticks and edits, for the window to register through its workspace."""

    ticks: tuple[tuple[str, str], ...] = ()
    edits: tuple[Intervention, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ticks or self.edits)


@dataclass(frozen=True)
class Picks:
    """The modules the lessons use on one model (None: the model has none that fits).

    ``first``: the first module with parameters (the image goes into it); ``layer``: one at mid depth with one tensor
    in and out; ``grad_layer``: the same where a full backward hook works too (no in-place op after it); ``head``:
    the module whose output is the model's output; ``blocks``: containers of several operations where a full
    backward hook works (``block`` the first); ``victim``: a module whose output an in-place module (``culprit``)
    overwrites next.
    """

    first: str | None = None
    layer: str | None = None
    grad_layer: str | None = None
    head: str | None = None
    blocks: tuple[str, ...] = ()
    victim: str | None = None
    culprit: str | None = None

    @property
    def block(self) -> str | None:
        return self.blocks[0] if self.blocks else None


def _is_leaf(module: nn.Module) -> bool:
    return next(module.children(), None) is None


def _single(run: ModuleRun) -> bool:
    """Runs once, takes a tensor that depends on the image, returns one tensor, does not write into its input."""
    return (
        run.calls == 1
        and run.output_form == "tensor"
        and len(run.output_shapes) == 1
        and not run.modifies_input
        and run.input_needs_grad
    )


def _hookable(run: ModuleRun) -> bool:
    """``_single``, and no in-place op changes its output later: a full backward hook works too."""
    return _single(run) and not run.output_modified_later


def _middle(paths: list[str], known: ModelSurvey) -> str | None:
    """The middle one, among those with spatial (N, C, H, W) output if there are any."""
    spatial = [p for p in paths if len(known.runs[p].output_shapes[0]) == 4] or paths
    return spatial[len(spatial) // 2] if spatial else None


def plan(model: nn.Module, known: ModelSurvey) -> Picks:
    """Pick the modules the lessons run on from a survey of ``model`` (``app.core.engine.tree.survey``): no model runs."""
    modules = dict(model.named_modules())
    order = [path for path in known.runs if path in modules]  # modules in the order they (first) finished
    leaves = [p for p in order if p and _is_leaf(modules[p])]
    weighted = [
        p
        for p in leaves
        if _single(known.runs[p])
        and any(True for _ in modules[p].parameters(recurse=False))
        and len(known.runs[p].output_shapes[0]) >= 2
    ]
    strict = [p for p in weighted if _hookable(known.runs[p])]
    root = known.run_of("")
    head = None
    if root.output_form == "tensor" and root.output_shapes:
        # the last module that gives the model's output (or the same numbers reshaped, as a flatten does)
        size = math.prod(root.output_shapes[0])
        same = [
            p
            for p in leaves
            if known.runs[p].calls == 1
            and known.runs[p].output_form == "tensor"
            and math.prod(known.runs[p].output_shapes[0]) == size
        ]
        head = same[-1] if same else None
    blocks = tuple(
        path
        for path in order
        if path
        and not _is_leaf(modules[path])
        and _hookable(known.runs[path])
        and sum(1 for p in leaves if p.startswith(path + ".")) >= 2
    )
    victim = culprit = None
    for path, after in zip(order, order[1:]):
        if (
            path in leaves
            and known.runs[path].output_modified_later
            and known.runs[path].output_form == "tensor"
            and after in leaves
            and known.runs[after].modifies_input
            and getattr(modules[after], "inplace", False) is True
        ):
            victim, culprit = path, after
            break
    return Picks(
        first=weighted[0] if weighted else None,
        layer=_middle(strict, known) or _middle(weighted, known),
        grad_layer=_middle(strict, known),
        head=head,
        blocks=blocks,
        victim=victim,
        culprit=culprit,
    )


class _UseBuiltIn(Exception):
    """The model cannot show the lesson (its gradients are all zero, no container ends in a module); the lesson
    runs on the small built-in network instead, with this message as its note."""


# ---- the built-in networks -------------------------------------------------------------------------------------
TINY_CODE = f"""from torch import nn

model = nn.Sequential()
model.add_module("times2", nn.Linear(1, 1, bias=False))
with torch.no_grad():
    model.times2.weight.fill_({TINY_WEIGHT})  # y = 2 x: dy/dx = 2"""


def tiny_network() -> nn.Module:
    """y = 2 x: one Linear(1, 1) without bias, its weight 2, so that every gradient is a small exact number."""
    model = nn.Sequential()
    model.add_module("times2", nn.Linear(1, 1, bias=False))
    with torch.no_grad():
        model.times2.weight.fill_(TINY_WEIGHT)
    return model.eval()


SMALL_CODE = """from collections import OrderedDict

from torch import nn

torch.manual_seed(0)
model = nn.Sequential(OrderedDict(
    conv=nn.Conv2d(3, 8, 3, padding=1, bias=False),
    bn=nn.BatchNorm2d(8),
    relu=nn.ReLU(inplace=True),  # overwrites bn's output
    block=nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()),
    pool=nn.AdaptiveAvgPool2d(1),
    flat=nn.Flatten(),
    fc=nn.Linear(8, 10),
)).eval()"""

SMALL_SHAPE = (1, 3, 16, 16)


def small_network() -> nn.Module:
    """A small CNN with every feature the lessons need: an in-place ReLU after a BatchNorm, a container, a head."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(3, 8, 3, padding=1, bias=False),
            bn=nn.BatchNorm2d(8),
            relu=nn.ReLU(inplace=True),
            block=nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()),
            pool=nn.AdaptiveAvgPool2d(1),
            flat=nn.Flatten(),
            fc=nn.Linear(8, 10),
        )
    ).eval()


def small_image() -> torch.Tensor:
    return torch.randn(SMALL_SHAPE, generator=torch.Generator().manual_seed(0))


def catalogue_code(name: str) -> str:
    """Python that builds the catalogue model ``name`` as the lesson's ``model`` (random weights)."""
    return f"import torchvision\n\nmodel = torchvision.models.get_model({literal(name)}, weights=None).eval()"


def model_code_for(loaded: Any) -> str:
    """Python that builds the model of a ``LoadedModel`` as ``model``: runnable for torchvision's catalogue and for a
    ``model.py:FUNCTION`` factory; for other files a line to fill in."""
    source = getattr(loaded, "source", "catalogue")
    if source == "catalogue":
        return catalogue_code(loaded.name)
    model_file = getattr(loaded, "model_file", "")
    if source == "python" and ":" in model_file:
        file, _, factory = model_file.rpartition(":")
        plain = all(part.isidentifier() and not keyword.iskeyword(part) for part in factory.split("."))
        build = f"user_model.{factory}" if plain else f"getattr(user_model, {factory!r})"  # a name never becomes code
        return (
            "import importlib.util\n\n"
            f'spec = importlib.util.spec_from_file_location("user_model", {file!r})\n'
            "user_model = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(user_model)\n"
            f"model = {build}().eval()"
        )
    if source == "state_dict":
        return (
            "import torchvision\n\n"
            f"model = torchvision.models.get_model({literal(loaded.name)}, weights=None)\n"
            f"model.load_state_dict(torch.load({model_file!r}))  # unwrap it first if the file is a checkpoint\n"
            "model.eval()"
        )
    if source == "pickle":
        return f"model = torch.load({model_file!r}, weights_only=False).eval()  # a pickled model: trusted files only"
    return f"model = ...  # {one_line(loaded.name)}, in eval mode (set this to your model)"


# ---- handles ---------------------------------------------------------------------------------------------------
class _Handles:
    """Every hook a lesson registers by itself (and every registry it makes), removed in one place.

    PyTorch remembers which kind of backward hook a module had (``_is_full_backward_hook``) even after the handle is
    removed, and refuses the other kind from then on; the flag is put back as it was, so that a lesson leaves the
    model exactly as it found it.
    """

    def __init__(self) -> None:
        self._handles: list[RemovableHandle] = []
        self._registries: list[HookRegistry] = []
        self._flags: dict[int, tuple[nn.Module, bool | None]] = {}
        self._inplace: list[tuple[nn.Module, bool]] = []

    def add(self, handle: RemovableHandle) -> RemovableHandle:
        self._handles.append(handle)
        return handle

    def remember(self, module: nn.Module) -> None:
        """Note the module's backward-hook kind before anything registers one there."""
        if id(module) not in self._flags:
            self._flags[id(module)] = (module, module._is_full_backward_hook)

    def registry(self, model: nn.Module) -> HookRegistry:
        registry = HookRegistry(model)
        self._registries.append(registry)
        return registry

    def backward_hook(self, module: nn.Module, hook: Callable[..., Any], *, full: bool) -> RemovableHandle:
        """``register_full_backward_hook`` (``full``) or the deprecated ``register_backward_hook``."""
        self.remember(module)
        if not module._backward_hooks:
            module._is_full_backward_hook = None  # the other kind was used and removed before: allowed again
        if full:
            return self.add(module.register_full_backward_hook(hook))
        return self.add(module.register_backward_hook(hook))

    def not_in_place(self, module: nn.Module) -> None:
        """Switch ``module.inplace`` off until the lesson ends."""
        self._inplace.append((module, module.inplace))
        module.inplace = False

    def remove(self, handle: RemovableHandle) -> None:
        handle.remove()
        self._restore_flags()

    def remove_all(self) -> None:
        for handle in self._handles:
            handle.remove()
        for registry in self._registries:
            registry.clear()
        for module, inplace in reversed(self._inplace):
            module.inplace = inplace
        self._inplace.clear()
        self._restore_flags()

    def _restore_flags(self) -> None:
        for module, flag in self._flags.values():
            if not module._backward_hooks:
                module._is_full_backward_hook = flag

    def left(self) -> int:
        """Handles still on a module: 0 after ``remove_all``."""
        count = sum(1 for h in self._handles if (hooks := h.hooks_dict_ref()) is not None and h.id in hooks)
        return count + sum(r.handle_count() for r in self._registries)


# ---- running ---------------------------------------------------------------------------------------------------
@dataclass
class _Setting:
    """What one lesson runs on."""

    model: nn.Module
    x: torch.Tensor  # (1, C, H, W) on the model's device
    device: str
    picks: Picks
    other: torch.Tensor | None  # image B for the mix, on the model's device
    model_code: str  # Python that defines ``model``
    note: str = ""
    other_text: str = "image B"


def _built_in(note: str) -> _Setting:
    """The small built-in network and its image, for a lesson the given model cannot show."""
    small = small_network()
    x = small_image()
    picks = plan(small, survey(small, x))
    return _Setting(small, x, "cpu", picks, torch.flip(x, dims=[-1]), SMALL_CODE, note, other_text="A mirrored")


@dataclass
class _Outcome:
    ok: bool
    claim: str
    summary: str
    columns: tuple[str, str]
    rows: list[Row]
    paths: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _device_of(model: nn.Module) -> str:
    parameter = next(model.parameters(), None)
    return str(parameter.device) if parameter is not None else "cpu"


def _cpu(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", copy=True)


def _num(value: float) -> str:
    """Four significant digits; 3.2000000476837 (2 x 1.6 in float32) reads 3.2."""
    if isinstance(value, torch.Tensor):
        value = float(value)
    return f"{value:.4g}"


def _mean_abs(tensor: torch.Tensor) -> float:
    return float(tensor.abs().mean())


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().max()) if a.numel() else 0.0


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    """Equal up to float rounding, relative to the size of the values."""
    if a.shape != b.shape:
        return False
    scale = float(b.abs().max()) if b.numel() else 0.0
    return _max_diff(a, b) <= rtol * max(scale, 1e-12)


def _record(result: RunResult, path: str, kind: str) -> torch.Tensor:
    for record in result.records:
        if record.path == path and record.kind == kind and record.call == 0 and record.leaf == "":
            return record.tensor
    raise HookscopeError(f"The run kept no {kind} record of {path}.", module_path=path)


def _run(setting: _Setting, registry: HookRegistry, x: torch.Tensor | None = None, **options: Any) -> RunResult:
    """Forward, the top-1 logit, backward to the image: Hookscope's own run (``capture_run``)."""
    return capture_run(setting.model, registry, setting.x if x is None else x, device=setting.device, **options)


def _forward_backward(setting: _Setting) -> tuple[object, int | None]:
    """A plain forward and backward pass (hooks fire, nothing is recorded): the output and the target class."""
    with torch.enable_grad():
        xin = setting.x.detach().clone().requires_grad_(True)
        output = setting.model(xin)
        score, index, _ = _objective(output, "top1")
        torch.autograd.grad(score, [xin])
    return output, index


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ---- snippets ------------------------------------------------------------------------------------------------------
SCORE_CODE = '''def score(output):
    """What Hookscope differentiates: the top-1 logit (the sum of the output when it is not class scores)."""
    if output.ndim == 2 and output.shape[0] == 1 and output.shape[1] > 1:
        return output[0, output[0].argmax()]
    return output.sum()


def image_grad():
    """Forward, score, backward: the gradient at the image."""
    xin = x.clone().requires_grad_(True)
    score(model(xin)).backward()
    return xin.grad'''


def _script(title: str, setting: _Setting, body: str, *, tiny: bool = False) -> str:
    """A whole runnable script: the model, an input standing in for the image, the lesson's hooks and prints."""
    parts = [f'"""Hookscope lesson: {title}.\n\nPlain PyTorch, runnable on its own."""', "", "import torch"]
    parts += ["", setting.model_code]
    if not tiny:
        shape = tuple(setting.x.shape)
        parts += [
            f"x = torch.randn({shape}, generator=torch.Generator().manual_seed(0))  # stands in for your image",
            "",
            "",
            SCORE_CODE,
        ]
    parts += ["", "", body.strip("\n"), ""]
    return "\n".join(parts)


def _handle_names(snippet: str) -> list[str]:
    """The handle variables a snippets.py snippet assigns (``h_edit0_scale_grad_fc = ...``)."""
    return re.findall(r"^(h_\w+) = ", snippet, flags=re.MULTILINE)


# ---- the lessons -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lesson:
    """One lesson: its words, how it runs, what it sets up in the window and the code that does the same."""

    id: str
    title: str
    hook: str  # the hook it teaches: "forward", "pre", "backward", "tensor"; "all" for handles and pitfalls
    text: str  # two or three sentences: what the hook receives, what returning a value does, its pitfall
    needs: str  # "tiny", or the Picks field it runs on
    compute: Callable[[_Setting, _Handles], _Outcome]
    code: Callable[[_Setting], str]
    app: Callable[[Picks, str], AppSetup] | None = None

    @property
    def tiny(self) -> bool:
        return self.needs == "tiny"

    def setup(self, picks: Picks, other_image: str = OTHER) -> AppSetup:
        """The ticks and edits that are this lesson in Hookscope's own terms (empty when it has none, or when the
        model has no module for it). ``other_image`` names image B for a mix edit."""
        if self.app is None or self.tiny or getattr(picks, self.needs) is None:
            return AppSetup()
        return self.app(picks, other_image)

    def own_hooks(self, picks: Picks) -> tuple[HookInfo, ...]:
        """The hooks the lesson's run registers on the model by itself (beyond :meth:`setup`), all removed when the
        run ends: for a window to list while the run lives. None for a tiny lesson, or where the model lacks the
        module (the built-in network is used then)."""
        path = getattr(picks, self.needs) if not self.tiny else None
        if path is None:
            return ()
        note = f"The lesson '{self.title}' registered it for its run; it is removed when the run ends."
        return tuple(HookInfo(path, kind, method, note) for kind, method in _OWN_HOOKS[self.id])

    def prepare(
        self,
        model: nn.Module | None,
        image: torch.Tensor | None,
        *,
        picks: Picks | None = None,
        other: torch.Tensor | None = None,
        model_code: str | None = None,
        other_text: str | None = None,
    ) -> _Setting:
        """What the lesson will run on: the given model, or a built-in network where it needs one."""
        if self.tiny:
            return _Setting(tiny_network(), torch.tensor([[TINY_INPUT]]), "cpu", Picks(), None, TINY_CODE)
        note = ""
        if model is not None and image is not None:
            device = _device_of(model)
            x = image.detach().to(device)
            if picks is None:
                picks = plan(model, survey(model, x))
            if getattr(picks, self.needs) is not None:
                b = other.detach().to(device) if other is not None else torch.flip(x, dims=[-1])
                text = other_text or ("image B" if other is not None else "A mirrored")
                return _Setting(
                    model, x, device, picks, b, model_code or "model = ...  # your model, in eval mode", other_text=text
                )
            note = f"Shown on a small built-in network: this model has {_MISSING[self.needs]}."
        else:
            note = "Shown on a small built-in network: no model was given."
        return _built_in(note)

    def snippet(self, model: nn.Module | None = None, image: torch.Tensor | None = None, **options: Any) -> str:
        """The plain PyTorch of this lesson on ``model`` (the built-in network without one)."""
        return self.code(self.prepare(model, image, **options))

    def run(
        self,
        model: nn.Module | None,
        image: torch.Tensor | None,
        *,
        picks: Picks | None = None,
        other: torch.Tensor | None = None,
        model_code: str | None = None,
        other_text: str | None = None,
    ) -> LessonResult:
        """Register the lesson's hooks, run, check the claim, remove every hook (also when something raises).

        ``image`` is the (1, C, H, W) input as the model takes it; ``other`` image B for the mix (default: the image
        mirrored); ``picks`` the modules to use (default: ``plan`` on a survey of the model); ``model_code`` the
        Python that builds the model, for the snippet. A tiny lesson ignores the model and the image.
        """
        setting = self.prepare(model, image, picks=picks, other=other, model_code=model_code, other_text=other_text)
        hooks = _Handles()
        error = ""
        try:
            try:
                outcome = self.compute(setting, hooks)
            except _UseBuiltIn as reason:
                hooks.remove_all()
                setting = _built_in(f"Shown on a small built-in network: {reason}")
                outcome = self.compute(setting, hooks)
        except Exception as exc:  # noqa: BLE001  (a lesson that breaks is a failed lesson, reported in one line)
            error = f"{type(exc).__name__}: {_first_line(exc)}"
            outcome = _Outcome(False, f"The lesson stopped: {error}", f"error: {error}", ("", ""), [])
        finally:
            hooks.remove_all()
        left = hooks.left()
        ok = outcome.ok and not left
        claim = outcome.claim + (f" But {left} handle(s) were left on the model." if left else "")
        try:
            snippet = self.code(setting)
        except Exception as exc:  # noqa: BLE001
            snippet = f"# No code for this lesson: {_first_line(exc)}\n"
        return LessonResult(
            lesson=self.id, ok=ok, claim=claim, summary=outcome.summary, columns=outcome.columns, rows=outcome.rows,
            snippet=snippet, paths=outcome.paths, note=setting.note, warnings=outcome.warnings,
            tensors=outcome.tensors, handles_left=left, error=error,
        )  # fmt: skip


DEPRECATED = "register_backward_hook (deprecated)"
# What each lesson's run registers by itself, per (hook kind, PyTorch method), on the module it needs.
_OWN_HOOKS: dict[str, tuple[tuple[str, str], ...]] = {
    "forward-export": (("forward", FORWARD),),
    "forward-mixup": (("forward", FORWARD),),
    "pre-double": (("pre", PRE), ("forward", FORWARD)),
    "backward-grad-input": (("backward", FULL_BACKWARD),),
    "backward-deprecated": (("backward", DEPRECATED), ("backward", FULL_BACKWARD)),
    "tensor-scale": (),
    "tensor-mean": (("tensor", TENSOR),),
    "handle-remove": (("forward", FORWARD),),
    "pitfalls": (("forward", FORWARD), ("backward", FULL_BACKWARD), ("tensor", TENSOR)),
}
_ZERO_GRADIENT = (
    "on this model the gradient at {path} is zero everywhere (an untrained head with zero weights passes no "
    "gradient back), so every number would be 0."
)
_MISSING = {
    "first": "no module with parameters that takes one tensor",
    "layer": "no module with parameters that takes one tensor and returns one",
    "head": "no module whose output is the model's output",
    "grad_layer": "no module a full backward hook works on (an in-place op follows every one)",
    "block": "no container module whose hooks work",
    "victim": "no module whose output an in-place module overwrites",
}


# ---- forward hook: export a layer's input and output ---------------------------------------------------------
def _forward_export(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.layer
    module = s.model.get_submodule(path)
    exported: dict[str, torch.Tensor] = {}

    def export(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        exported["input"] = _cpu(inputs[0])  # off the GPU, a copy: nothing later can change it
        exported["output"] = _cpu(output)

    handle = hooks.add(module.register_forward_hook(export))
    with torch.no_grad():
        s.model(s.x)
    hooks.remove(handle)
    with torch.no_grad():  # the module alone, on what was exported: the same output
        again = _cpu(module(exported["input"].to(s.device)))
    x_in, out = exported["input"], exported["output"]
    diff = _max_diff(again, out)
    ok = _close(again, out) and x_in.device.type == "cpu" and out.device.type == "cpu"
    rows = [
        Row("shape", "×".join(map(str, x_in.shape)), "×".join(map(str, out.shape))),
        Row("mean", _num(x_in.mean()), _num(out.mean())),
        Row("min / max", f"{_num(x_in.min())} / {_num(x_in.max())}", f"{_num(out.min())} / {_num(out.max())}"),
        Row("device", str(x_in.device), str(out.device)),
        Row(f"{path} on the exported input", "", f"max |difference| {_num(diff)}"),
    ]
    return _Outcome(
        ok,
        f"The forward hook exported {path}'s input and output to the CPU; {path} run on the exported input gives the "
        f"exported output (max difference {_num(diff)}).",
        f"{path}: input {'×'.join(map(str, x_in.shape))} mean {_num(x_in.mean())}, output "
        f"{'×'.join(map(str, out.shape))} mean {_num(out.mean())}, re-run differs by {_num(diff)}",
        (f"{path}'s input", f"{path}'s output"),
        rows,
        {"layer": path},
        {"input": x_in, "output": out, "again": again},
    )


def _forward_export_code(s: _Setting) -> str:
    m = module_expression(s.picks.layer)
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
    return _script("a forward hook exports a layer's input and output", s, body)


# ---- forward hook that returns a value: manifold mixup -----------------------------------------------------------
def _forward_mixup(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.layer
    registry = hooks.registry(s.model)
    registry.add(path, "forward")
    a = _record(_run(s, registry), path, "forward")
    b = _record(_run(s, registry, s.other), path, "forward")
    registry.add_edit(Intervention("mix", path, factor=MIX_WEIGHT, other_image=OTHER))
    mixed = _record(_run(s, registry, others={OTHER: s.other}), path, "forward")
    registry.clear()
    expected = MIX_WEIGHT * a + (1 - MIX_WEIGHT) * b
    diff = _max_diff(mixed, expected)
    ok = _close(mixed, expected) and not _close(mixed, a)
    rows = [
        Row("A alone: mean", _num(a.mean()), ""),
        Row(f"B ({s.other_text}) alone: mean", _num(b.mean()), ""),
        Row("mean", _num(expected.mean()), _num(mixed.mean())),
        Row("first value", _num(expected.flatten()[0]), _num(mixed.flatten()[0])),
        Row("max |difference|", "", _num(diff)),
    ]
    return _Outcome(
        ok,
        f"The forward hook on {path} returned 0.7 A + 0.3 B, and the network went on with it: the output the next "
        f"hook saw equals 0.7 A + 0.3 B computed by hand (max difference {_num(diff)}).",
        f"{path}: mean A {_num(a.mean())}, B {_num(b.mean())}, 0.7A+0.3B {_num(expected.mean())}, hook "
        f"{_num(mixed.mean())}, max diff {_num(diff)}",
        ("0.7 A + 0.3 B by hand", "what the hook returned"),
        rows,
        {"layer": path},
        {"a": a, "b": b, "mixed": mixed},
    )


def _forward_mixup_code(s: _Setting) -> str:
    path = s.picks.layer
    m = module_expression(path)
    edit = Intervention("mix", path, factor=MIX_WEIGHT, other_image=OTHER)
    code = edit_snippet(edit, 0)
    handles = ", ".join(f"{h}" for h in _handle_names(code))
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
    return _script("a forward hook returns 0.7 A + 0.3 B (manifold mixup)", s, body)


def _mix_setup(picks: Picks, other_image: str) -> AppSetup:
    return AppSetup(
        ((picks.layer, "forward"),), (Intervention("mix", picks.layer, factor=MIX_WEIGHT, other_image=other_image),)
    )


# ---- forward pre-hook: double the input ----------------------------------------------------------------------------
def _pre_double(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.first
    registry = hooks.registry(s.model)
    registry.add(path, "pre")
    registry.add(path, "forward")
    before = _run(s, registry)
    registry.add_edit(Intervention("scale-input", path, factor=2.0))
    after = _run(s, registry)
    registry.clear()
    in0, in1 = _record(before, path, "pre"), _record(after, path, "pre")
    out0, out1 = _record(before, path, "forward"), _record(after, path, "forward")
    ok = torch.equal(in1, 2 * in0) and not torch.equal(in1, in0)
    ratio = float(out1.abs().mean() / out0.abs().mean()) if float(out0.abs().mean()) else math.nan
    rows = [
        Row("input: mean", _num(in0.mean()), _num(in1.mean())),
        Row("input: first value", _num(in0.flatten()[0]), _num(in1.flatten()[0])),
        Row("input: max", _num(in0.max()), _num(in1.max())),
        Row("output: mean |·|", _num(out0.abs().mean()), _num(out1.abs().mean())),
        Row("after is twice before", "", "yes, exactly" if ok else "no"),
    ]
    return _Outcome(
        ok,
        f"The pre-hook on {path} returned (2 × input,), and {path} received exactly twice its input "
        f"(its output changed by ×{_num(ratio)}).",
        f"{path} input mean {_num(in0.mean())} -> {_num(in1.mean())} (x2 exactly: {'yes' if ok else 'no'})",
        ("input as given", "with the pre-hook"),
        rows,
        {"first": path},
        {"input_before": in0, "input_after": in1, "output_before": out0, "output_after": out1},
    )


def _pre_double_code(s: _Setting) -> str:
    path = s.picks.first
    m = module_expression(path)
    code = edit_snippet(Intervention("scale-input", path, factor=2.0), 0)
    handles = ", ".join(_handle_names(code))
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
    return _script("a forward pre-hook doubles a module's input", s, body)


def _pre_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.first, "pre"),), (Intervention("scale-input", picks.first, factor=2.0),))


# ---- full backward hook: read grad_output, edit grad_input -------------------------------------------------------
GRAD_INPUT_FACTOR = 1.6


def _backward_grad_input(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.grad_layer
    module = s.model.get_submodule(path)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def read(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        seen.append((_cpu(grad_input[0]), _cpu(grad_output[0])))

    hooks.remember(module)
    registry = hooks.registry(s.model)
    # The edit is Hookscope's (prepend=True: it runs first); the reading hook after it sees the edited grad_input.
    registry.add_edit(Intervention("scale-grad-input", path, factor=GRAD_INPUT_FACTOR))
    hooks.backward_hook(module, read, full=True)
    with registry.edits_suspended():
        _run(s, registry)
    _run(s, registry)
    registry.clear()
    (in0, out0), (in1, out1) = seen[0], seen[-1]
    if not _mean_abs(in0):
        raise _UseBuiltIn(_ZERO_GRADIENT.format(path=path))
    out_same = torch.equal(out0, out1)
    in_scaled = _close(in1, GRAD_INPUT_FACTOR * in0)
    ok = len(seen) == 2 and out_same and in_scaled and _mean_abs(in0) > 0
    ratio = _mean_abs(in1) / _mean_abs(in0) if _mean_abs(in0) else math.nan
    rows = [
        Row("grad_output: mean |·|", _num(_mean_abs(out0)), _num(_mean_abs(out1))),
        Row("grad_output unchanged", "", "yes, exactly" if out_same else "no"),
        Row("grad_input: mean |·|", _num(_mean_abs(in0)), _num(_mean_abs(in1))),
        Row("grad_input: first value", _num(in0.flatten()[0]), _num(in1.flatten()[0])),
        Row("grad_input ratio", "", f"×{_num(ratio)}"),
    ]
    return _Outcome(
        ok,
        f"The full backward hook on {path} read grad_output and returned grad_input × {GRAD_INPUT_FACTOR}: "
        f"grad_output is unchanged, grad_input is ×{_num(ratio)}.",
        f"{path} grad_output mean|.| {_num(_mean_abs(out0))} (unchanged: {'yes' if out_same else 'no'}), grad_input "
        f"{_num(_mean_abs(in0))} -> {_num(_mean_abs(in1))} (x{_num(ratio)})",
        ("without the hook's edit", f"grad_input × {GRAD_INPUT_FACTOR}"),
        rows,
        {"layer": path},
        {"grad_input_before": in0, "grad_input_after": in1, "grad_output_before": out0, "grad_output_after": out1},
    )


def _backward_grad_input_code(s: _Setting) -> str:
    path = s.picks.grad_layer
    m = module_expression(path)
    code = edit_snippet(Intervention("scale-grad-input", path, factor=GRAD_INPUT_FACTOR), 0)
    handles = ", ".join(_handle_names(code))
    body = f"""seen = []


# A full backward hook gets (module, grad_input, grad_output) when the gradient reaches the module.
def read(module, grad_input, grad_output):
    seen.append((grad_input[0].detach().clone(), grad_output[0].detach().clone()))


h_read = {m}.register_full_backward_hook(read)
image_grad()

{code.strip()}

image_grad()  # the edit (prepend=True) runs first: read sees the edited grad_input
for handle in (h_read, {handles}):
    handle.remove()
(grad_in0, grad_out0), (grad_in1, grad_out1) = seen
print("grad_output unchanged:", torch.equal(grad_out0, grad_out1))
print("grad_input ratio:", (grad_in1.abs().mean() / grad_in0.abs().mean()).item())"""
    return _script("a full backward hook reads grad_output and edits grad_input", s, body)


def _backward_setup(picks: Picks, _other: str) -> AppSetup:
    # The window's Grad column (a tensor hook: grad_output, unchanged) and Grad in column (a full backward hook after
    # the edit's: grad_input, scaled) show both sides of the lesson.
    return AppSetup(
        ((picks.grad_layer, "tensor"), (picks.grad_layer, "grad_input")),
        (Intervention("scale-grad-input", picks.grad_layer, factor=GRAD_INPUT_FACTOR),),
    )


# ---- the deprecated register_backward_hook -------------------------------------------------------------------------
def _block_ending_in_a_module(s: _Setting, hooks: _Handles) -> str:
    """The first candidate container whose last operation is one of its modules (its output is that module's
    output), found in one pass without gradients; containers that already have backward hooks are skipped (PyTorch
    allows one kind per module)."""
    modules = dict(s.model.named_modules())
    candidates = [p for p in s.picks.blocks if not modules[p]._backward_hooks]
    last_leaf: list[object] = [None]
    found: list[str] = []

    def leaf_done(module: nn.Module, inputs: tuple, output: object) -> None:
        last_leaf[0] = output

    def block_done(path: str):
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            if output is last_leaf[0]:
                found.append(path)

        return hook

    probes = [hooks.add(modules[p].register_forward_hook(block_done(p))) for p in candidates]
    inside = {name for p in candidates for name, m in modules[p].named_modules(prefix=p) if m is not modules[p]}
    probes += [hooks.add(modules[name].register_forward_hook(leaf_done)) for name in inside if _is_leaf(modules[name])]
    try:
        with torch.no_grad():
            s.model(s.x)
    finally:
        for probe in probes:
            hooks.remove(probe)
    if not found:
        raise _UseBuiltIn(
            "no container of this model ends in one of its own modules (their last operation is a "
            "function such as torch.cat or +), so the last operation's gradient cannot be shown by hand."
        )
    first = next(p for p in candidates if p in found)
    s.picks = replace(s.picks, blocks=(first,))
    return first


def _backward_deprecated(s: _Setting, hooks: _Handles) -> _Outcome:
    path = _block_ending_in_a_module(s, hooks)
    block = s.model.get_submodule(path)
    leaves = {name: m for name, m in block.named_modules() if name and _is_leaf(m)}
    pending: dict[str, list[torch.Tensor]] = {}
    calls: list[tuple[str, torch.Tensor, object]] = []  # (leaf, its input as it was, its output) in call order
    boundary: dict[str, Any] = {}
    got: dict[str, Any] = {}

    def leaf_in(name: str):
        def hook(module: nn.Module, inputs: tuple) -> None:
            pending.setdefault(name, []).append(inputs[0].detach().clone() if inputs else None)

        return hook

    def leaf_out(name: str):
        def hook(module: nn.Module, inputs: tuple, output: object) -> None:
            calls.append((name, pending[name].pop(), output))

        return hook

    def block_in(module: nn.Module, inputs: tuple) -> None:
        boundary["input"] = inputs[0].detach().clone()

    def block_out(module: nn.Module, inputs: tuple, output: object) -> None:
        boundary["output"] = output

    def old_hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        got["old"] = tuple(_cpu(g) if g is not None else None for g in grad_input)

    def full_hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
        got["full"] = _cpu(grad_input[0])
        got["grad_output"] = grad_output[0].detach().clone()

    # One pass each: PyTorch refuses both kinds of backward hook on one module at the same time.
    probes = [hooks.add(block.register_forward_pre_hook(block_in)), hooks.add(block.register_forward_hook(block_out))]
    for name, leaf in leaves.items():
        probes.append(hooks.add(leaf.register_forward_pre_hook(leaf_in(name))))
        probes.append(hooks.add(leaf.register_forward_hook(leaf_out(name))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = hooks.backward_hook(block, old_hook, full=False)
        _forward_backward(s)
    hooks.remove(old)
    for probe in probes:
        hooks.remove(probe)
    last = next(((name, x_in) for name, x_in, out in reversed(calls) if out is boundary["output"]), None)
    boundary.pop("output")
    calls.clear()
    full = hooks.backward_hook(block, full_hook, full=True)
    _forward_backward(s)
    hooks.remove(full)

    # The same gradients by hand: the block on its input, and its last operation on that operation's input.
    grad_output = got["grad_output"]
    with torch.enable_grad():
        x_block = boundary["input"].clone().requires_grad_(True)
        by_hand_block = _cpu(torch.autograd.grad(block(x_block), x_block, grad_output)[0])
        by_hand_last = None
        if last is not None and last[1] is not None:
            x_last = last[1].clone().requires_grad_(True)
            # a clone goes in: an in-place module must not write into the leaf that takes the gradient
            by_hand_last = _cpu(torch.autograd.grad(leaves[last[0]](x_last.clone()), x_last, grad_output)[0])
    old_grads = [g for g in got["old"] if g is not None]
    full_grad = got["full"]
    if not _mean_abs(full_grad):
        raise _UseBuiltIn(_ZERO_GRADIENT.format(path=f"{path}'s input"))
    old_match = by_hand_last is not None and any(_close(g, by_hand_last) for g in old_grads)
    old_grad = next((g for g in old_grads if by_hand_last is not None and _close(g, by_hand_last)), old_grads[0])
    full_match = _close(full_grad, by_hand_block)
    differ = old_grad.shape != full_grad.shape or not _close(old_grad, full_grad)
    ok = old_match and full_match and differ
    last_path = f"{path}.{last[0]}" if last is not None else "its last operation"
    warning = next((str(w.message) for w in caught if "non-full backward hook" in str(w.message)), "")
    shape = lambda t: "×".join(map(str, t.shape))  # noqa: E731
    rows = [
        Row("grad_input is the gradient of", f"{last_path}'s input (the last op)", f"{path}'s input"),
        Row("grad_input: shape", shape(old_grad), shape(full_grad)),
        Row("grad_input: mean |·|", _num(_mean_abs(old_grad)), _num(_mean_abs(full_grad))),
        Row(
            "max |difference| from that gradient by hand",
            _num(_max_diff(old_grad, by_hand_last)) if by_hand_last is not None else "n/a",
            _num(_max_diff(full_grad, by_hand_block)),
        ),
        Row("PyTorch's warning", warning.split(". ")[0] + "." if warning else "(none)", "(none)"),
    ]
    return _Outcome(
        ok,
        f"On {path} the deprecated register_backward_hook reported the gradient of {last_path}'s input (mean |·| "
        f"{_num(_mean_abs(old_grad))}), not of {path}'s input, which register_full_backward_hook reported (mean |·| "
        f"{_num(_mean_abs(full_grad))}).",
        f"{path}: old hook grad_in mean|.| {_num(_mean_abs(old_grad))} = {last_path}'s input grad; full hook "
        f"{_num(_mean_abs(full_grad))} = {path}'s input grad",
        ("register_backward_hook (deprecated)", "register_full_backward_hook"),
        rows,
        {"block": path, "last_op": last_path},
        {
            "old": old_grad,
            "full": full_grad,
            "by_hand_block": by_hand_block,
            **({"by_hand_last": by_hand_last} if by_hand_last is not None else {}),
        },
        [warning] if warning else [],
    )


def _backward_deprecated_code(s: _Setting) -> str:
    m = module_expression(s.picks.block)
    body = f"""import warnings

block = {m}
got = {{}}


def old_hook(module, grad_input, grad_output):  # deprecated: grad_input of the block's LAST operation
    got["old"] = grad_input[0].detach().clone()


def full_hook(module, grad_input, grad_output):  # grad_input: the gradient of the block's own input
    got["full"] = grad_input[0].detach().clone()


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    handle = block.register_backward_hook(old_hook)
    image_grad()
handle.remove()
print("PyTorch warns:", caught[0].message if caught else "(nothing)")

# PyTorch refuses the other kind on a module that had one, even after remove(): reset its memory of it.
block._is_full_backward_hook = None
handle = block.register_full_backward_hook(full_hook)
image_grad()
handle.remove()
block._is_full_backward_hook = None

print("old  grad_input", tuple(got["old"].shape), "mean |.|", got["old"].abs().mean().item())
print("full grad_input", tuple(got["full"].shape), "mean |.|", got["full"].abs().mean().item())"""
    return _script("register_backward_hook (deprecated) beside register_full_backward_hook", s, body)


# ---- tensor hook: the gradient x 1.6 on the tiny network ----------------------------------------------------------
TENSOR_FACTOR = 1.6


def _tensor_scale(s: _Setting, hooks: _Handles) -> _Outcome:
    registry = hooks.registry(s.model)
    registry.add_edit(Intervention("scale-grad", "times2", factor=TENSOR_FACTOR))
    with registry.edits_suspended():
        before = _run(s, registry).input_grad
    after = _run(s, registry).input_grad
    registry.clear()
    b, a = float(before.flatten()[0]), float(after.flatten()[0])
    ok = b == TINY_WEIGHT and math.isclose(a, TINY_WEIGHT * TENSOR_FACTOR, rel_tol=1e-6)
    rows = [
        Row("y = 2 x at x = 1: dy/dx", _num(b), _num(a)),
        Row("the hook's factor", "", f"×{TENSOR_FACTOR}"),
    ]
    return _Outcome(
        ok,
        f"The tensor hook on y's gradient returned it × {TENSOR_FACTOR}: x.grad went from {_num(b)} to {_num(a)} "
        f"({_num(b)} × {TENSOR_FACTOR} = {_num(TINY_WEIGHT * TENSOR_FACTOR)}).",
        f"x.grad {_num(b)} -> {_num(a)} (x{TENSOR_FACTOR})",
        ("without the hook", f"gradient × {TENSOR_FACTOR}"),
        rows,
        {"module": "times2"},
        {"before": before, "after": after},
    )


def _tensor_scale_code(s: _Setting) -> str:
    code = edit_snippet(Intervention("scale-grad", "times2", factor=TENSOR_FACTOR), 0)
    handles = ", ".join(_handle_names(code))
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
    return _script(f"a tensor hook multiplies a gradient by {TENSOR_FACTOR}", s, body, tiny=True)


# ---- tensor hook: the mean gradient x 50 on the model --------------------------------------------------------------
MEAN_FACTOR = 50.0


def _tensor_mean(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.head
    registry = hooks.registry(s.model)
    registry.add(path, "tensor")
    registry.add_edit(Intervention("scale-grad", path, factor=MEAN_FACTOR))
    with registry.edits_suspended():
        before = _run(s, registry)
    after = _run(s, registry)
    registry.clear()
    g0, g1 = before.input_grad, after.input_grad
    if not _mean_abs(g0):
        raise _UseBuiltIn(_ZERO_GRADIENT.format(path="the image"))
    h0, h1 = _record(before, path, "tensor"), _record(after, path, "tensor")
    m0, m1 = _mean_abs(g0), _mean_abs(g1)
    ratio = m1 / m0 if m0 else math.nan
    ok = m0 > 0 and _close(g1, MEAN_FACTOR * g0, rtol=1e-4) and _close(h1, MEAN_FACTOR * h0, rtol=1e-5)
    rows = [
        Row(f"gradient of {path}'s output: mean |·|", _num(_mean_abs(h0)), _num(_mean_abs(h1))),
        Row("gradient at the image: mean |·|", _num(m0), _num(m1)),
        Row("gradient at the image: first value", _num(g0.flatten()[0]), _num(g1.flatten()[0])),
        Row("ratio", "", f"×{_num(ratio)}"),
    ]
    return _Outcome(
        ok,
        f"The tensor hook on {path}'s output returned its gradient × {_num(MEAN_FACTOR)}; every gradient behind it "
        f"scaled the same: the mean |gradient| at the image went from {_num(m0)} to {_num(m1)} (×{_num(ratio)}).",
        f"image grad mean|.| {_num(m0)} -> {_num(m1)} (x{_num(ratio)}) via a tensor hook on {path}",
        ("without the hook", f"gradient × {_num(MEAN_FACTOR)}"),
        rows,
        {"head": path},
        {"image_grad_before": g0, "image_grad_after": g1, "head_grad_before": h0, "head_grad_after": h1},
    )


def _tensor_mean_code(s: _Setting) -> str:
    code = edit_snippet(Intervention("scale-grad", s.picks.head, factor=MEAN_FACTOR), 0)
    handles = ", ".join(_handle_names(code))
    body = f"""before = image_grad()

{code.strip()}

after = image_grad()
for handle in ({handles},):
    handle.remove()
print("mean |gradient| at the image:", before.abs().mean().item(), "->", after.abs().mean().item())
print("ratio:", (after.abs().mean() / before.abs().mean()).item())"""
    return _script(f"a tensor hook multiplies the mean gradient by {_num(MEAN_FACTOR)}", s, body)


def _tensor_mean_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.head, "tensor"),), (Intervention("scale-grad", picks.head, factor=MEAN_FACTOR),))


# ---- handle.remove() ---------------------------------------------------------------------------------------------------
def _handle_remove(s: _Setting, hooks: _Handles) -> _Outcome:
    path = s.picks.layer
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
    return _Outcome(
        ok,
        f"register_forward_hook added one hook to {path} ({n0} -> {n1}) and it counted one call; after "
        f"handle.remove() {path} had {n2} again and the next forward pass left the count at {c2}.",
        f"{path}: hooks {n0} -> {n1} -> {n2} after remove; calls counted {c1}, then still {c2}",
        ("hook registered", "after handle.remove()"),
        rows,
        {"layer": path},
    )


def _handle_remove_code(s: _Setting) -> str:
    m = module_expression(s.picks.layer)
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
    return _script("handle.remove()", s, body)


# ---- the pitfalls, live ------------------------------------------------------------------------------------------
def _pitfalls(s: _Setting, hooks: _Handles) -> _Outcome:
    path, culprit_path = s.picks.victim, s.picks.culprit
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
    no_clone, clone = _cpu(kept["no clone"]), _cpu(kept["clone"])
    with torch.no_grad():
        overwritten = _cpu(culprit.forward(kept["clone"].clone()))  # what the in-place op makes of the true output
    capture_wrong = not torch.equal(no_clone, clone) and torch.equal(no_clone, overwritten)

    # 2. A full backward hook on the module: the in-place op then modifies the hook's view of the output.
    raised = ""
    full = hooks.backward_hook(module, lambda *_: None, full=True)
    try:
        _forward_backward(s)
    except RuntimeError as error:
        raised = _first_line(error)
    finally:
        hooks.remove(full)

    # 3. Hookscope's fix: the Grad tick on the module, a tensor hook on its output (the tensor itself, not the
    # module's boundary: an in-place op after the module cannot break it).
    registry = hooks.registry(s.model)
    registry.add(path, "tensor")
    result = _run(s, registry)
    info = next(i for i in registry.handles() if i.path == path)
    grad = _record(result, path, "tensor")
    registry.clear()
    # ... against the gradient of the network with the op not in place (autograd.grad on the module's output).
    outputs: list[torch.Tensor] = []
    hooks.not_in_place(culprit)
    handle = hooks.add(module.register_forward_hook(lambda m, i, output: outputs.append(output)))
    with torch.enable_grad():
        output = s.model(s.x.detach().clone().requires_grad_(True))
        score, _, _ = _objective(output, result.target_index if result.target_index is not None else "top1")
        reference = _cpu(torch.autograd.grad(score, outputs[0])[0])
    hooks.remove_all()
    diff = _max_diff(grad, reference)
    fix_ok = info.method == TENSOR and _close(grad, reference)
    ok = capture_wrong and bool(raised) and fix_ok
    culprit_name = type(culprit).__name__
    rows = [
        Row(f"min of {path}'s output as kept", _num(no_clone.min()), _num(clone.min())),
        Row("what was kept", f"{culprit_path}'s result (overwritten)", f"{path}'s true output"),
        Row(
            f"gradient of {path}'s output",
            f"register_full_backward_hook raises: {raised}" if raised else "register_full_backward_hook: no error",
            f"{info.method}: max |difference| from the non-in-place network {_num(diff)}",
        ),
    ]
    return _Outcome(
        ok,
        f"Kept without clone, {path}'s output was overwritten by the in-place {culprit_name} ({culprit_path}): min "
        f"{_num(no_clone.min())}; with clone the true values: min {_num(clone.min())}. A full backward hook on {path} "
        f"{'raised' if raised else 'did not raise'}; Hookscope's fix, a tensor hook on the output, gives the gradient "
        f"of the network without the in-place op (max difference {_num(diff)}).",
        f"{path}: kept min {_num(no_clone.min())} without clone, {_num(clone.min())} with; full backward hook "
        f"{'raises' if raised else 'does not raise'}; tensor-hook fix differs by {_num(diff)}",
        ("the pitfall", "the fix"),
        rows,
        {"victim": path, "culprit": culprit_path},
        {"no_clone": no_clone, "clone": clone, "grad": grad, "reference": reference},
        [info.note] if info.note else [],
    )


def _pitfalls_code(s: _Setting) -> str:
    path = s.picks.victim
    m = module_expression(path)
    code = hook_snippet(HookInfo(path, "tensor", TENSOR))
    handles = ", ".join(_handle_names(code))
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
    return _script("the pitfalls: in-place ops after a hook", s, body)


def _pitfalls_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.victim, "forward"), (picks.victim, "tensor")))  # the Act and Grad columns


def _export_setup(picks: Picks, _other: str) -> AppSetup:
    return AppSetup(((picks.layer, "pre"), (picks.layer, "forward")))


# ---- the list ------------------------------------------------------------------------------------------------------
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
    ),
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
    ),
    Lesson(
        "backward-grad-input",
        "Full backward hook: read grad_output, edit grad_input",
        "backward",
        "register_full_backward_hook(fn) calls fn(module, grad_input, grad_output) when the gradient reaches the "
        "module: grad_output is the gradient of its output, grad_input that of its input. Returning a tuple replaces "
        "grad_input (here × 1.6) and leaves grad_output as it was; it is the only hook that gives grad_input (the "
        "window's Grad in column). Pitfall: it raises when an in-place op follows the module, and fires only where "
        "the graph needs it.",
        "grad_layer",
        _backward_grad_input,
        _backward_grad_input_code,
        _backward_setup,
    ),
    Lesson(
        "backward-deprecated",
        "Why register_backward_hook is deprecated",
        "backward",
        "The old register_backward_hook attaches to the autograd node of the module's output, so on a module made of "
        "several operations its grad_input is the gradient of the last operation's input, not of the module's input. "
        "register_full_backward_hook gives the module's own. Shown side by side, one pass each: PyTorch refuses both "
        "kinds on one module.",
        "block",
        _backward_deprecated,
        _backward_deprecated_code,
    ),
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
    ),
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
    ),
)


SMALL_SIZE = 112  # pixels: enough for every lesson, and a --run-all of resnet18 in seconds on a CPU


@dataclass(frozen=True)
class LessonInputs:
    """What the lessons run on for one model: image A and B as the model takes them, and the modules to use."""

    x: torch.Tensor
    other: torch.Tensor
    picks: Picks
    note: str = ""  # e.g. that the model needed its own input size


def lesson_inputs(
    model: nn.Module, preprocess: Any, image: Any, other: Any, size: int | None = SMALL_SIZE
) -> LessonInputs:
    """Preprocess images A and B (PIL images) for ``model`` at ``size`` pixels (None or 0: the model's own size),
    survey the model once and pick the lessons' modules. A model that cannot run at ``size`` (a ViT's fixed patch
    grid) is run at its own size, and ``note`` says so."""
    device = _device_of(model)
    own = preprocess
    if size and size < preprocess.crop:
        preprocess = replace(preprocess, crop=size, resize=None if preprocess.resize is None else size * 256 // 224)
    note = ""
    x = preprocess.to_tensor(image).to(device)
    try:
        known = model_pass("forward", survey, model, x)
    except Exception as error:  # noqa: BLE001  (any failure at the small size: the model's own size is the fix)
        if preprocess is own:
            raise
        note = f"{size} pixels did not fit the model ({_first_line(error)}); the lessons use its own {own.crop}."
        preprocess = own
        x = preprocess.to_tensor(image).to(device)
        known = model_pass("forward", survey, model, x)
    _check_backward(model, x)
    return LessonInputs(x, preprocess.to_tensor(other).to(device), plan(model, known), note)


def _check_backward(model: nn.Module, x: torch.Tensor) -> None:
    """The model's own backward failure (an in-place op autograd needed) is one error, in export's words, before
    the lessons start: not half the lessons failing with it."""
    with torch.enable_grad():
        xin = x.detach().clone().requires_grad_(True)
        score, _, _ = _objective(model_pass("forward", model, xin), "top1")
        if score.requires_grad:
            model_pass("backward", torch.autograd.grad, score, [xin], allow_unused=True)


def lesson(lesson_id: str) -> Lesson:
    for candidate in LESSONS:
        if candidate.id == lesson_id:
            return candidate
    raise HookscopeError(f"There is no lesson '{lesson_id}'; lessons: {', '.join(item.id for item in LESSONS)}.")


def result_line(result: LessonResult) -> str:
    """One line per lesson for the command line: id, the numbers, ok or failed."""
    line = f"{result.lesson:<20} {result.summary}"
    if result.note:
        line += " [built-in network]"
    return f"{line}  {result.status}"
