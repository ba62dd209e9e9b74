"""Dream a channel: activation maximisation (feature visualization) read through a real forward hook.

An image is optimised so that one channel of a module (or the whole module, or a direction in its channel space)
responds as strongly as it can. The recipe is the one Lucid and its PyTorch port Lucent made the standard, because
plain pixel optimisation gives high-frequency noise instead of a picture:

- the image lives in Fourier space, each frequency scaled by ``1/f`` (so low frequencies dominate), and its colours
  are decorrelated: the three channels the optimiser moves are mapped to RGB by the square root of ImageNet's
  colour-correlation matrix (Lucent's ``color_correlation_svd_sqrt``), then squashed into [0, 1] by a sigmoid;
- every step sees it jittered, scaled and rotated a little (one random affine warp, the border filled with grey, as
  Lucent's pad + jitter + random_scale + random_rotate + jitter), so only features that survive small moves grow;
- Adam, learning rate 0.05, a few hundred steps; every random number comes from one ``torch.Generator`` seeded by
  ``seed``, so one seed gives one image.

The model sees the image through its own preprocessing (the ``Preprocess`` mean and std of the loaded model), so
what the channel responds to is what it would respond to in a real input. The activation is read by a forward hook
registered on the live module for the optimisation only, and removed afterwards (also on error or cancel). It reads
only the calls made by the optimising thread, so a run that uses the same model elsewhere never feeds it. Since only
that module's output matters, the forward pass stops there (the rest of the network is not run).

The time per step is reported against a bare forward+backward of the whole model at the same size, measured in the
same run: bare passes are spread over the run, each right before a step, and the ratio is the median over those
adjacent pairs (a machine that stalls for a moment spoils one pair, not the figure).
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.nn import functional as F
from torch.utils.hooks import RemovableHandle

from hookscope.core.common.errors import HookscopeError
from hookscope.core.engine.blame import model_pass
from hookscope.core.engine.memory_fit import activation_bytes
from hookscope.core.engine.numeric import first_non_finite_output
from hookscope.core.engine.structure import tensor_leaves
from hookscope.core.models.images import Preprocess

# The square root of ImageNet's colour correlation (Lucid's ``color_correlation_svd_sqrt``, used as is by Lucent),
# normalised so that its largest column has unit length.
COLOR_CORRELATION_SVD_SQRT = np.array([[0.26, 0.09, 0.02], [0.27, 0.00, -0.05], [0.27, -0.09, 0.03]], dtype=np.float32)
COLOR_CORRELATION = COLOR_CORRELATION_SVD_SQRT / np.max(np.linalg.norm(COLOR_CORRELATION_SVD_SQRT, axis=0))
FOURIER_SD = 0.01  # the starting spectrum's spread (Lucent's default): a nearly uniform grey image
FOURIER_MAGIC = 4.0  # Lucid's constant that divides the image after the inverse FFT (less saturated colours)
# Lucent's standard transforms at 224 pixels: pad 12, jitter 8, scales 0.9..1.1, rotations -10..10 degrees (0
# weighted more), jitter 4. Pixel amounts scale with the image size.
PAD_AT_224 = 12
JITTER_AT_224 = (8, 4)
SCALES = tuple(1 + (i - 5) / 50.0 for i in range(11))
ANGLES = tuple(range(-10, 11)) + (0,) * 5
LEARNING_RATE = 0.05
GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # for a model that takes one channel: the image's luminance


class VisualizeError(HookscopeError):
    """A layer, channel or direction that cannot be visualised; ``module_path`` names the module."""


class _StopForward(Exception):
    """Raised by the hook once it has the module's output: the rest of the network is not needed."""


@dataclass(frozen=True)
class Objective:
    """What to maximise: the mean activation of ``channel`` of ``layer``'s output, of the whole output (``channel``
    None), or of its projection on ``direction`` (a vector over the channels). ``negative`` minimises instead.

    Channels are dimension 1 of a (B, C, H, W) or (B, C) output and the last dimension of a (B, tokens, C) one
    (a transformer's tokens).
    """

    layer: str
    channel: int | None = None
    direction: tuple[float, ...] | None = None
    negative: bool = False

    def __post_init__(self) -> None:
        if self.channel is not None and self.direction is not None:
            raise ValueError("An objective is a channel or a direction, not both.")
        if self.direction is not None:
            object.__setattr__(self, "direction", tuple(float(v) for v in self.direction))

    def describe(self) -> str:
        if self.direction is not None:
            what = f"{self.layer} along a direction of {len(self.direction)} channels"
        elif self.channel is None:
            what = f"{self.layer} (whole layer)"
        else:
            what = f"{self.layer} channel {self.channel}"
        return f"{'minimise' if self.negative else 'maximise'} {what}"


@dataclass(frozen=True)
class VisualizeSettings:
    """How to optimise. ``images`` > 1 with ``diversity`` > 0 makes several images that differ: the similarity of
    their Gram matrices at the layer (Lucid's ``diversity`` objective) is subtracted, times ``diversity``."""

    steps: int = 256
    size: int = 224
    seed: int = 0
    learning_rate: float = LEARNING_RATE
    images: int = 1
    diversity: float = 0.0
    progress_every: int = 8
    bare_samples: int = 9  # bare forward+backward timings, spread over the run, each paired with the next step
    device: str | None = None  # None: where the model's parameters are

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise VisualizeError("The number of steps cannot be negative.")
        if self.size < 16:
            raise VisualizeError(f"The image size must be at least 16 pixels, not {self.size}.")
        if self.images < 1:
            raise VisualizeError("At least one image is needed.")
        if self.diversity < 0:
            raise VisualizeError("Diversity is a weight of zero or more.")


@dataclass
class Visualization:
    """The result: ``images`` (uint8 H x W x 3, one per image asked for), the objective (the raw mean activation,
    averaged over the images, on the plain image with no jitter) at the start and the end, and the timings."""

    objective: Objective
    images: list[np.ndarray]
    objective_start: float
    objective_end: float
    steps_done: int
    cancelled: bool
    step_ms: float  # median time of one optimisation step
    bare_ms: float  # median time of a bare forward+backward of the whole model at the same size
    pair_ratios: list[float] = field(default_factory=list)  # step / bare, for each bare pass and the step after it
    history: list[float] = field(default_factory=list)  # the objective as optimised (transformed image), per step
    non_finite_at: str | None = None  # the first module whose output went NaN or inf ("": the image itself)

    def non_finite_line(self) -> str:
        """One warning when the objective went NaN or inf ('' when it stayed finite)."""
        if self.non_finite_at is None and all(map(math.isfinite, (self.objective_start, self.objective_end))):
            return ""
        if self.non_finite_at is None:
            where = "no module's output held NaN or inf on the plain image"
        elif not self.non_finite_at:
            where = "the image itself went NaN or inf (a step's gradient was not finite)"
        else:
            where = f"the first module whose output held NaN or inf is '{self.non_finite_at}'"
        return f"the objective is not a finite number ({self.objective_end:g}); {where}."

    @property
    def image(self) -> np.ndarray:
        return self.images[0]

    @property
    def ratio(self) -> float:
        """Time per step over a bare forward+backward: the median over adjacent (bare, step) pairs."""
        if self.pair_ratios:
            return statistics.median(self.pair_ratios)
        return self.step_ms / self.bare_ms if self.bare_ms > 0 else math.nan

    def pil(self, index: int = 0) -> Image.Image:
        return Image.fromarray(self.images[index])

    def summary(self) -> str:
        """One line: what was optimised, the objective at the start and the end, the time per step."""
        state = f"cancelled after {self.steps_done} steps" if self.cancelled else f"{self.steps_done} steps"
        return (
            f"{self.objective.describe()}: objective {self.objective_start:.4g} -> {self.objective_end:.4g} "
            f"({state}); {self.step_ms:.1f} ms per step, bare forward+backward {self.bare_ms:.1f} ms, "
            f"ratio {self.ratio:.2f} (median of {len(self.pair_ratios)} adjacent pairs)"
        )


# ---- the image: Fourier parametrisation with decorrelated colour --------------------------------------------------


def _frequencies(size: int) -> np.ndarray:
    """|f| of every coefficient of a real 2-D FFT of a size x size image (Lucent's ``rfft2d_freqs``)."""
    fy = np.fft.fftfreq(size)[:, None]
    fx = np.fft.fftfreq(size)[: size // 2 + 1]
    return np.sqrt(fx * fx + fy * fy)


class FourierImage:
    """``count`` RGB images in [0, 1] made from a learnable spectrum (the parameter the optimiser moves)."""

    def __init__(self, count: int, size: int, generator: torch.Generator, device: torch.device) -> None:
        freqs = _frequencies(size)
        self.size = size
        spectrum = torch.randn((count, 3, *freqs.shape, 2), generator=generator) * FOURIER_SD
        self.spectrum = spectrum.to(device).requires_grad_(True)
        scale = 1.0 / np.maximum(freqs, 1.0 / size)
        self._scale = torch.tensor(scale, dtype=torch.float32, device=device)[None, None, ..., None]
        self._colors = torch.tensor(COLOR_CORRELATION.T, device=device)

    def __call__(self) -> torch.Tensor:
        """The images, (count, 3, size, size) in [0, 1], differentiable in the spectrum."""
        spectrum = torch.view_as_complex(self._scale * self.spectrum)
        image = torch.fft.irfftn(spectrum, s=(self.size, self.size), norm="ortho") / FOURIER_MAGIC
        image = (image.permute(0, 2, 3, 1) @ self._colors).permute(0, 3, 1, 2)  # decorrelated -> RGB
        return torch.sigmoid(image)


def to_uint8(images: torch.Tensor) -> list[np.ndarray]:
    """(N, 3, H, W) in [0, 1] -> N uint8 H x W x 3 arrays (0-255, C-contiguous)."""
    pixels = (images.detach().to("cpu", torch.float32).clamp(0, 1) * 255).round().to(torch.uint8)
    return [np.ascontiguousarray(p.permute(1, 2, 0).numpy()) for p in pixels]


# ---- the random transforms -------------------------------------------------------------------------------------


def _random_warp(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One random affine warp per step: Lucent's pad (grey), jitter, scale, rotation and jitter, in one resampling
    at the same size (the same transform for every image of the batch, as Lucent does)."""
    size = images.shape[-1]
    pixels = size / 224.0
    pad = PAD_AT_224 * pixels

    def pick(options: Sequence[float]) -> float:
        return float(options[int(torch.randint(len(options), (1,), generator=generator))])

    def jitter(amount: int) -> float:
        reach = max(1, round(amount * pixels))
        return float(torch.randint(-reach, reach + 1, (1,), generator=generator))

    scale = pick(SCALES)
    angle = math.radians(pick(ANGLES))
    shift_x = jitter(JITTER_AT_224[0]) + jitter(JITTER_AT_224[1])
    shift_y = jitter(JITTER_AT_224[0]) + jitter(JITTER_AT_224[1])
    # The output samples the input over (size + 2 pad) / scale pixels: the image shrinks into a grey frame when
    # zoomed out, as after Lucent's pad.
    reach = (size + 2 * pad) / size / scale
    cos, sin = math.cos(angle) * reach, math.sin(angle) * reach
    theta = torch.tensor(
        [[cos, -sin, 2 * shift_x / size], [sin, cos, 2 * shift_y / size]], dtype=images.dtype, device=images.device
    )
    grid = F.affine_grid(theta.expand(images.shape[0], 2, 3), list(images.shape), align_corners=False)
    # Zero padding of (image - 0.5): the border is mid grey, Lucent's pad(constant_value=0.5).
    return F.grid_sample(images - 0.5, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 0.5


# ---- reading the layer -----------------------------------------------------------------------------------------


def find_module(model: nn.Module, path: str) -> nn.Module:
    """The module at ``path`` ("" is the model); one readable error with close names when there is none."""
    modules = dict(model.named_modules())
    if path in modules:
        return modules[path]
    import difflib

    close = difflib.get_close_matches(path, [p for p in modules if p], n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise VisualizeError(f"The model has no module named '{path}'.{hint}", module_path=path)


class LayerTap:
    """A forward hook on one module that keeps its output for the thread that armed it, and stops the forward there.

    The hook is on the live module only inside ``with tap:``; calls from other threads (another run on the same
    model) pass through untouched.
    """

    def __init__(self, module: nn.Module, path: str) -> None:
        self.module = module
        self.path = path
        self.output: torch.Tensor | None = None
        self._owner: int | None = None
        self._armed = False  # only inside run(): a bare timing pass on the same thread goes through untouched
        self._handle: RemovableHandle | None = None

    def __enter__(self) -> LayerTap:
        self._owner = threading.get_ident()
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *_: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._owner = None
        self.output = None

    @property
    def registered(self) -> bool:
        return self._handle is not None

    def _hook(self, module: nn.Module, inputs: object, output: object) -> None:
        if not self._armed or threading.get_ident() != self._owner or self.output is not None:
            return  # someone else's run, a bare pass, or a second call of the module in the same forward
        leaves = [t for _, t in tensor_leaves(output) if t.is_floating_point()]
        if not leaves:
            raise VisualizeError(f"'{self.path}' gives no floating-point tensor to visualise.", module_path=self.path)
        output = leaves[0]
        if output.requires_grad:
            # The objective's gradient reaches the module through views (the channels moved last, a transposed
            # Gram matrix): non-contiguous. PyTorch 2.14's CPU BatchNorm backward in eval mode gets a
            # non-contiguous grad_output wrong (measured here: gradients on every channel for a one-channel
            # objective), so every gradient enters the module contiguous.
            output.register_hook(lambda grad: grad.contiguous())
        self.output = output
        raise _StopForward

    def run(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """Run ``model`` on ``x`` up to the module; its output (the first float tensor in it)."""
        self.output = None
        self._armed = True
        try:
            model_pass("forward", model, x)  # the model's own failure in export's words
        except _StopForward:
            pass
        finally:
            self._armed = False
        output, self.output = self.output, None
        if output is None:
            raise VisualizeError(f"'{self.path}' did not run in the model's forward pass.", module_path=self.path)
        return output


def _channels_last(output: torch.Tensor) -> torch.Tensor:
    """The layer's output as (B, positions, C): channels on the last axis."""
    if output.ndim == 4:
        return output.flatten(2).transpose(1, 2)
    if output.ndim == 3:  # (B, tokens, C)
        return output
    if output.ndim == 2:
        return output[:, None, :]
    raise VisualizeError(f"Cannot visualise an output of shape {tuple(output.shape)}: it has no channels.")


def load_direction(path: str) -> tuple[float, ...]:
    """A direction over a layer's channels from a file: a .npy array, or numbers in a text file."""
    try:
        values = np.load(path) if str(path).lower().endswith(".npy") else np.loadtxt(path, ndmin=1)
    except (OSError, ValueError) as error:
        raise VisualizeError(f"Cannot read the direction '{path}': {error}", path=str(path)) from error
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or not np.any(values):
        raise VisualizeError(f"The direction '{path}' needs finite numbers, not all zero.", path=str(path))
    return tuple(values.tolist())


def check_objective(objective: Objective, output: torch.Tensor) -> None:
    """A readable error when the channel or direction does not fit the layer's output."""
    channels = _channels_last(output).shape[-1]
    if objective.channel is not None and not 0 <= objective.channel < channels:
        raise VisualizeError(
            f"'{objective.layer}' has {channels} channels (0-{channels - 1}); there is no channel {objective.channel}.",
            module_path=objective.layer,
        )
    if objective.direction is not None and len(objective.direction) != channels:
        raise VisualizeError(
            f"The direction has {len(objective.direction)} values but '{objective.layer}' has {channels} channels.",
            module_path=objective.layer,
        )


def activation(objective: Objective, output: torch.Tensor) -> torch.Tensor:
    """The raw objective per image, (B,): the mean of the channel, of the layer, or of the projection."""
    values = _channels_last(output).float()
    if objective.direction is not None:
        direction = torch.tensor(objective.direction, dtype=values.dtype, device=values.device)
        direction = direction / direction.norm().clamp_min(1e-12)
        return (values @ direction).mean(dim=1)
    if objective.channel is None:
        return values.mean(dim=(1, 2))
    return values[..., objective.channel].mean(dim=1)


def gram_similarity(output: torch.Tensor) -> torch.Tensor:
    """Mean cosine similarity between the images' Gram matrices at the layer (Lucid's ``diversity``); 0 for one."""
    values = _channels_last(output).float()
    count = values.shape[0]
    if count < 2:
        return values.new_zeros(())
    grams = F.normalize((values.transpose(1, 2) @ values).flatten(1), dim=1)
    similarity = grams @ grams.T
    return (similarity.sum() - similarity.diagonal().sum()) / (count * (count - 1))


# ---- the optimisation ------------------------------------------------------------------------------------------


class _Model:
    """The model's input side: RGB in [0, 1] -> the model's own normalisation (and channel count)."""

    def __init__(self, module: nn.Module, preprocess: Preprocess, device: torch.device) -> None:
        self.module = module
        channels = preprocess.channels
        self.gray = torch.tensor(GRAY_WEIGHTS, device=device).view(1, 3, 1, 1) if channels == 1 else None
        self.mean = torch.tensor(preprocess.mean, device=device).view(1, channels, 1, 1)
        self.std = torch.tensor(preprocess.std, device=device).view(1, channels, 1, 1)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        if self.gray is not None:
            images = (images * self.gray).sum(dim=1, keepdim=True)
        return (images - self.mean) / self.std


def bare_forward_backward_ms(module: nn.Module, preprocess: Preprocess, size: int, device: torch.device) -> float:
    """One bare forward+backward of the whole model at ``size`` (gradient of the input only, as a run takes it)."""
    x = torch.rand((1, preprocess.channels, size, size), device=device, requires_grad=True)
    start = time.perf_counter()
    with torch.enable_grad():
        out = next((t for _, t in tensor_leaves(model_pass("forward", module, x)) if t.is_floating_point()), None)
        if out is not None and out.requires_grad:
            model_pass("backward", torch.autograd.grad, out.sum(), x)
    _sync(device)
    return (time.perf_counter() - start) * 1000


def _first_non_finite(module: nn.Module, layer: LayerTap, x: torch.Tensor) -> str:
    """Where the objective went NaN or inf: the first module whose output did on ``x`` ("": ``x`` itself)."""
    if not bool(torch.isfinite(x).all()):
        return ""
    with torch.no_grad():
        return first_non_finite_output(module, lambda: layer.run(module, x)) or layer.path


def memory_need(module: nn.Module, preprocess: Preprocess, layer: str) -> Callable[[int, int], float]:
    """``need(size, images)``: the bytes a visualisation must hold at once, at least: per image the spectrum four
    times (the parameter, its gradient, Adam's two moments), the image and its warp, and the activations autograd
    keeps as far as ``layer``; or the bare forward+backward of the whole model at one image, when that is more."""
    per_pixel = activation_bytes(module, preprocess.channels, layer)

    def need(size: int, images: int) -> float:
        spectrum = 3 * size * (size // 2 + 1) * 2 * 4
        return (
            images * (4 * spectrum + 2 * 3 * size * size * 4)
            + max(images * per_pixel.upto, per_pixel.total) * size * size
        )

    return need


def _device_of(module: nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# long because: the optimisation loop and the bare runs timed between its steps share the step's state and clock
def visualize(
    module: nn.Module,
    objective: Objective,
    preprocess: Preprocess,
    settings: VisualizeSettings | None = None,
    *,
    cancelled: Callable[[], bool] | None = None,
    progress: Callable[[int, float, np.ndarray], None] | None = None,
    tap: Callable[[LayerTap], None] | None = None,
) -> Visualization:
    """Optimise an image for ``objective`` on ``module`` (a model in eval mode), fed through ``preprocess``.

    ``cancelled()`` is checked before every step: when it says so, the result so far comes back with
    ``cancelled`` set. ``progress(step, objective, image)`` is called every ``settings.progress_every`` steps and
    after the last (``objective`` the raw value as optimised at that step, ``image`` the first image as uint8).
    ``tap(layer_tap)`` is called once the hook is registered (the window lists it while it lives). Raises
    :class:`VisualizeError` for a layer, channel or direction that does not fit.
    """
    settings = settings or VisualizeSettings()
    target = find_module(module, objective.layer)
    device = torch.device(settings.device) if settings.device else _device_of(module)
    generator = torch.Generator().manual_seed(settings.seed)
    image = FourierImage(settings.images, settings.size, generator, device)
    model = _Model(module, preprocess, device)
    sign = -1.0 if objective.negative else 1.0
    optimiser = torch.optim.Adam([image.spectrum], lr=settings.learning_rate)
    samples = max(settings.bare_samples, 1)
    bare_at = {round(i * settings.steps / samples) for i in range(samples)}
    step_times: list[float] = []
    bare_times: list[float] = []
    pair_ratios: list[float] = []
    history: list[float] = []
    steps_done = 0
    stopped = False
    non_finite_at: str | None = None

    with LayerTap(target, objective.layer) as layer:
        if tap is not None:
            tap(layer)
        with torch.no_grad():
            first = layer.run(module, model.normalise(image()))
            check_objective(objective, first)
            start_value = float(activation(objective, first).mean())
            if not math.isfinite(start_value):
                non_finite_at = _first_non_finite(module, layer, model.normalise(image()))
        for step in range(settings.steps):
            if cancelled is not None and cancelled():
                stopped = True
                break
            paired = step in bare_at
            if paired:
                bare_times.append(bare_forward_backward_ms(module, preprocess, settings.size, device))
            began = time.perf_counter()
            with torch.enable_grad():
                warped = _random_warp(image(), generator)
                output = layer.run(module, model.normalise(warped))
                value = activation(objective, output).mean()
                loss = -sign * value
                if settings.diversity > 0 and settings.images > 1:
                    loss = loss + settings.diversity * gram_similarity(output)
                (grad,) = model_pass("backward", torch.autograd.grad, loss, [image.spectrum])
            if non_finite_at is None and not math.isfinite(float(value.detach())):
                non_finite_at = _first_non_finite(module, layer, model.normalise(warped))
            image.spectrum.grad = grad
            optimiser.step()
            _sync(device)
            step_times.append((time.perf_counter() - began) * 1000)
            if paired:
                pair_ratios.append(step_times[-1] / bare_times[-1])
            steps_done = step + 1
            history.append(float(value.detach()))
            if progress is not None and (
                steps_done % max(settings.progress_every, 1) == 0 or steps_done == settings.steps
            ):
                with torch.no_grad():
                    progress(steps_done, history[-1], to_uint8(image()[:1])[0])
        with torch.no_grad():
            final = image()
            end_value = float(activation(objective, layer.run(module, model.normalise(final))).mean())
    if not bare_times:  # cancelled before the first step, or no steps: one measurement still
        bare_times.append(bare_forward_backward_ms(module, preprocess, settings.size, device))
    return Visualization(
        objective=objective,
        images=to_uint8(final),
        objective_start=start_value,
        objective_end=end_value,
        steps_done=steps_done,
        cancelled=stopped,
        step_ms=statistics.median(step_times) if step_times else math.nan,
        bare_ms=statistics.median(bare_times),
        pair_ratios=pair_ratios,
        history=history,
        non_finite_at=non_finite_at,
    )
