"""What a scan accumulates per module, merged batch by batch: per channel a running top-k (``TopK``) and the
moments of its values (``Moments``), and what one batch says about a module (``ModulePartial``).

Per channel a running top-k, merged per batch with a total order (score, then image index), so the result does not
depend on how the images are split into batches or shards: memory is bounded by the batch size and k, not by the
number of images. Statistics merge exactly (Chan et al.'s parallel update, in float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hookscope.core.scan.results import Layout, floats, unfloats

NO_IMAGE = 2**62  # the image index of an empty top-k slot: it ranks after every real image
SLOT_BYTES = 4 + 8 + 8  # one top-k slot of a channel: its float32 score, int64 image index and int64 position

Unit = tuple[str, int, int, int]  # one entry of a final top-k: (module path, channel, image index, flat position)


def rank_order(score: torch.Tensor, image: torch.Tensor, k: int) -> torch.Tensor:
    """Per row, the indexes of the best ``k`` of (C, M) candidates in a total order: higher score first, then lower
    image index (so ties, common at 0 after a ReLU, are broken the same way however the images were batched or
    sharded); NaN last."""
    if score.shape[1] == 1:  # one candidate per row (a batch of one image): nothing to order
        return torch.zeros_like(image[:, :1])
    key = torch.nan_to_num(score, nan=-math.inf, posinf=math.inf, neginf=-math.inf)
    by_image = torch.argsort(image, dim=1, stable=True)
    by_score = torch.argsort(key.gather(1, by_image), dim=1, descending=True, stable=True)
    return by_image.gather(1, by_score)[:, :k]


@dataclass
class TopK:
    """Per channel, the best entries so far, best first: (C, k) scores, image indexes and flat positions."""

    score: torch.Tensor  # float32
    image: torch.Tensor  # int64; NO_IMAGE in an empty slot
    position: torch.Tensor  # int64

    @classmethod
    def empty(cls, channels: int, k: int) -> TopK:
        return cls(
            torch.full((channels, k), -math.inf, dtype=torch.float32),
            torch.full((channels, k), NO_IMAGE, dtype=torch.int64),
            torch.zeros((channels, k), dtype=torch.int64),
        )

    @classmethod
    def ranked(cls, score: torch.Tensor, image: torch.Tensor, position: torch.Tensor, k: int) -> TopK:
        """The best ``k`` of (C, M) candidates (see ``rank_order``)."""
        order = rank_order(score, image, k)
        return cls(score.gather(1, order), image.gather(1, order), position.gather(1, order))

    def floor(self) -> torch.Tensor:
        """Per channel, the score a new entry must reach to have a chance of a place: the k-th best score, or -inf
        while a slot is empty (or the k-th is not a number). Reaching it is not enough (ties go to the lower image
        index), so it sorts out only entries that certainly lose."""
        last = torch.nan_to_num(self.score[:, -1], nan=-math.inf, posinf=math.inf, neginf=-math.inf)
        return torch.where(self.image[:, -1] == NO_IMAGE, torch.full_like(last, -math.inf), last)

    def merged(self, other: TopK, k: int) -> TopK:
        if not bool((other.image != NO_IMAGE).any()):  # only empty slots: they rank after every entry, so nothing
            return self  # changes (a long scan's batches mostly bring none)
        return TopK.ranked(
            torch.cat([self.score, other.score], 1),
            torch.cat([self.image, other.image], 1),
            torch.cat([self.position, other.position], 1),
            k,
        )

    def units(self, path: str) -> list[Unit]:
        """Every entry (empty slots left out) as units, channel by channel, best first."""
        return [(path, channel, int(image), int(position))
                for channel, (images, positions) in enumerate(zip(self.image.tolist(), self.position.tolist()))
                for image, position in zip(images, positions) if image != NO_IMAGE]  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"score": floats(self.score), "image": self.image.tolist(), "position": self.position.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopK:
        return cls(
            torch.tensor(unfloats(data["score"], -math.inf), dtype=torch.float32),
            torch.tensor(data["image"], dtype=torch.int64),
            torch.tensor(data["position"], dtype=torch.int64),
        )


@dataclass
class Moments:
    """Per channel: the mean and the sum of squared deviations (m2) of its values over every position of every
    image seen, in float64, and in how many images it was active (maximum > 0)."""

    values: int  # values per channel seen: images x positions
    images: int
    mean: np.ndarray
    m2: np.ndarray
    active: np.ndarray  # int64

    @classmethod
    def empty(cls, channels: int) -> Moments:
        return cls(0, 0, np.zeros(channels), np.zeros(channels), np.zeros(channels, dtype=np.int64))

    @classmethod
    def of_batch(cls, total: torch.Tensor, squares: torch.Tensor, peak: torch.Tensor, positions: int) -> Moments:
        """From per-image (N, C) sums of values and of squares over ``positions`` values each (float32 sums: the
        spread of a channel is accurate while its mean is not thousands of times its spread), then the exact update
        for equal counts, in float64."""
        sums = total.double().numpy()
        means = sums / positions
        m2 = np.maximum(squares.double().numpy() - sums * means, 0.0)
        batch_mean = means.mean(axis=0)
        spread = m2.sum(axis=0) + positions * np.square(means - batch_mean).sum(axis=0)
        active = (peak > 0).sum(dim=0).numpy().astype(np.int64)
        return cls(positions * means.shape[0], means.shape[0], batch_mean, spread, active)

    def merged(self, other: Moments) -> Moments:
        """Chan et al.'s parallel update: exact for any split of the images."""
        if self.values == 0:
            return other
        if other.values == 0:
            return self
        total = self.values + other.values
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.values / total)
        m2 = self.m2 + other.m2 + np.square(delta) * (self.values * other.values / total)
        return Moments(total, self.images + other.images, mean, m2, self.active + other.active)

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation over every value seen."""
        return np.sqrt(self.m2 / self.values) if self.values else np.full_like(self.m2, math.nan)

    @property
    def active_fraction(self) -> np.ndarray:
        return self.active / self.images if self.images else np.full(self.active.shape, math.nan)

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "images": self.images, "mean": floats(self.mean), "m2": floats(self.m2),
                "active": self.active.tolist()}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Moments:
        return cls(int(data["values"]), int(data["images"]), np.array(unfloats(data["mean"]), dtype=np.float64),
                   np.array(unfloats(data["m2"]), dtype=np.float64), np.array(data["active"], dtype=np.int64))  # fmt: skip


@dataclass
class ModulePartial:
    """What one batch (or shard) says about one module: its layout, its top-k (already cut to k) and moments."""

    layout: Layout
    top: TopK
    moments: Moments
