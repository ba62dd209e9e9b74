"""The devices a run can use: only those actually present are offered."""

from __future__ import annotations

import torch

from app.core.errors import DeviceError


def available_devices() -> list[str]:
    """``cpu`` always, then each CUDA device, then ``mps`` where present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def resolve_device(spec: str) -> torch.device:
    """Turn ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` into a device, or say plainly why it cannot be used."""
    name = spec.strip().lower()
    if name == "cuda":
        name = "cuda:0"
    available = available_devices()
    if name not in available:
        raise DeviceError(f"Device '{spec}' is not available on this machine; available: {', '.join(available)}.")
    return torch.device(name)
