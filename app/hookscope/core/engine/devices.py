"""The devices a run can use: only those actually present are offered."""

from __future__ import annotations

import platform
import sys

import torch

from hookscope.core.common.errors import DeviceError


def available_devices() -> list[str]:
    """``cpu`` always, then each CUDA device, then ``mps`` where present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def unavailable_devices() -> dict[str, str]:
    """Why CUDA and MPS are not offered on this machine: ``{"cuda": "CUDA: ...", "mps": "MPS: ..."}``, one line
    each, for those that are not available (an empty dict where both are). For the Device box's tooltip."""
    reasons: dict[str, str] = {}
    if not torch.cuda.is_available():
        reasons["cuda"] = "CUDA: " + _cuda_reason()
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        reasons["mps"] = "MPS: " + _mps_reason(mps)
    return reasons


def _cuda_reason() -> str:
    if getattr(torch.version, "hip", None):
        return "no AMD GPU found (this PyTorch build is for ROCm)"
    if not torch.backends.cuda.is_built() or getattr(torch.version, "cuda", None) is None:
        return "this PyTorch build has no CUDA support (install a CUDA build of PyTorch to use an NVIDIA GPU)"
    try:
        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a broken driver install must not break the Device box
        count = 0
    if count == 0:
        return "no NVIDIA GPU found (or its driver is missing or too old)"
    return "the NVIDIA GPU cannot be used (check its driver)"


def _mps_reason(mps: object) -> str:
    if sys.platform != "darwin":
        return "only on Apple silicon Macs"
    if mps is None or not mps.is_built():
        return "this PyTorch build has no MPS support"
    if platform.machine() != "arm64":
        return "only on Apple silicon Macs (this Mac has an Intel processor)"
    return "needs macOS 12.3 or later"


def resolve_device(spec: str) -> torch.device:
    """Turn ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` into a device, or say plainly why it cannot be used."""
    name = spec.strip().lower()
    if name == "cuda":
        name = "cuda:0"
    available = available_devices()
    if name not in available:
        raise DeviceError(f"Device '{spec}' is not available on this machine; available: {', '.join(available)}.")
    return torch.device(name)
