"""What a model wants as input: a guess for models opened from files, user-edited values, and a readable line.

Catalogue models bring their weights' own transforms (``Preprocess.from_torchvision``, timm's data config); a
model opened from a file gets a guess (grayscale when its first convolution takes one channel, ImageNet's
statistics and 224 pixels otherwise) that the user can edit through :func:`custom_preprocess`.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from hookscope.core.common.errors import ModelError
from hookscope.core.models.images import Preprocess

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# ImageNet's statistics averaged over the three colours: the usual choice for a 1-channel model.
GRAY_MEAN = (0.449,)
GRAY_STD = (0.226,)
DEFAULT_SIZE = 224
DEFAULT_CROP_FRACTION = 224 / 256  # torchvision's presets: resize the shorter side to 256, centre-crop 224


def custom_preprocess(
    size: int = DEFAULT_SIZE,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    channels: int = 3,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
    interpolation: str = "bilinear",
) -> Preprocess:
    """A Preprocess from values a user typed: input ``size`` (square), ``mean``/``std`` (one value per channel,
    or one value for all; None: ImageNet's), 1 or 3 ``channels``, and the fraction of the resized image that
    the centre crop keeps (1.0: resize the shorter side straight to ``size``).

    Raises :class:`ModelError` with one readable line for values that cannot work.
    """
    if channels not in (1, 3):
        raise ModelError(f"Input channels must be 1 (grayscale) or 3 (RGB), not {channels}.")
    if not isinstance(size, int) or size < 1:
        raise ModelError(f"The input size must be a positive whole number of pixels, not {size!r}.")
    if not 0 < crop_fraction <= 1:
        raise ModelError(f"The crop fraction must be above 0 and at most 1, not {crop_fraction}.")
    mean = _per_channel("mean", mean, GRAY_MEAN if channels == 1 else IMAGENET_MEAN, channels)
    std = _per_channel("std", std, GRAY_STD if channels == 1 else IMAGENET_STD, channels)
    if any(s <= 0 for s in std):
        raise ModelError(f"Every std value must be above 0; got {_numbers(std)}.")
    try:
        return Preprocess(
            resize=max(size, round(size / crop_fraction)),
            crop=size,
            mean=mean,
            std=std,
            channels=channels,
            interpolation=interpolation,
        )
    except ValueError as error:
        raise ModelError(str(error)) from error


def _per_channel(
    what: str, values: Sequence[float] | None, default: tuple[float, ...], channels: int
) -> tuple[float, ...]:
    if values is None:
        return default
    try:
        numbers = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ModelError(f"The {what} must be numbers, not {values!r}.") from None
    if len(numbers) == 1:
        return numbers * channels
    if len(numbers) != channels:
        raise ModelError(
            f"The {what} needs {channels} value(s) for {channels} channel(s) (or one for all), got {len(numbers)}."
        )
    return numbers


def first_conv_channels(module: nn.Module) -> int | None:
    """How many channels the model's first convolution takes, or None when it has none."""
    for child in module.modules():
        if isinstance(child, (nn.Conv2d, nn.Conv1d, nn.Conv3d)):
            return int(child.in_channels)
    return None


def guess_preprocess(module: nn.Module) -> tuple[Preprocess, str]:
    """A starting point for a model opened from a file, and a sentence when the guess is known to be shaky.

    One input channel in the first convolution: grayscale input (a grayscale model gets a grayscale image);
    otherwise RGB. The size is the model's own ``image_size``/``img_size``/``input_size`` attribute when it has
    one (an int), or its ``config.image_size`` (transformers' models), else 224, with ImageNet statistics. All of
    it is editable with :func:`custom_preprocess`.
    """
    channels = first_conv_channels(module)
    size = DEFAULT_SIZE
    config = getattr(module, "config", None)
    candidates = [(module, a) for a in ("image_size", "img_size", "input_size")] + [(config, "image_size")]
    for owner, attribute in candidates:
        value = getattr(owner, attribute, None)
        if isinstance(value, int) and value > 0:
            size = value
            break
        if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) for v in value):
            size = int(value[-1])
            break
    note = ""
    if channels not in (None, 1, 3):
        note = (
            f"The model's first convolution takes {channels} channels; Hookscope feeds images as 1 (grayscale) "
            "or 3 (RGB) channels, so runs will fail until the model takes one of those."
        )
    return custom_preprocess(size=size, channels=1 if channels == 1 else 3), note


def describe_requirements(preprocess: Preprocess) -> str:
    """One line for the window, next to the input image: what the model is fed.

    Example: ``3 x 224 x 224, RGB, mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225); shorter side
    resized to 256 (bilinear), centre crop``.
    """
    colour = "grayscale" if preprocess.channels == 1 else "RGB"
    size = f"{preprocess.channels} x {preprocess.crop} x {preprocess.crop}, {colour}"
    stats = f"mean {_numbers(preprocess.mean)}, std {_numbers(preprocess.std)}"
    if preprocess.squash:
        side = preprocess.resize or preprocess.crop
        steps = f"resized to {side} x {side} ({preprocess.interpolation}), aspect ratio not kept"
        steps += ", centre crop" if side != preprocess.crop else ""
    elif preprocess.resize is None:
        steps = "centre crop, no resize"
    else:
        steps = f"shorter side resized to {preprocess.resize} ({preprocess.interpolation}), centre crop"
    return f"{size}, {stats}; {steps}"


def _numbers(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"
