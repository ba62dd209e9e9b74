"""A model lent to Hookscope comes back as it was lent: the training mode of every module and the device of every
parameter and buffer are put back (``hookscope.capture``, and the viewer when it closes). Hookscope's hooks go with
the registry that added them (``HookRegistry.clear``), which never touches the caller's own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class LentModel:
    """What of ``model`` a run may change, as it was when lent."""

    model: nn.Module
    training: list[tuple[nn.Module, bool]]
    devices: list[tuple[nn.Module, str, bool, torch.device]]  # (module, name, is a parameter, device)

    @classmethod
    def of(cls, model: nn.Module, devices_too: bool = True) -> LentModel:
        """What to give back; ``devices_too=False`` when nothing will move the model (a run on the device it is on):
        then only the training modes are kept, which is all a run there changes."""
        modules = list(model.modules())
        training = [(module, module.training) for module in modules]
        devices: list[tuple[nn.Module, str, bool, torch.device]] = []
        for module in modules if devices_too else ():
            for name, parameter in module._parameters.items():
                if parameter is not None:
                    devices.append((module, name, True, parameter.device))
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    devices.append((module, name, False, buffer.device))
        return cls(model, training, devices)

    def give_back(self) -> None:
        """Put the training modes and devices back; tensors already where they were are left alone (a run on the
        device the model is on moves nothing)."""
        for module, training in self.training:
            module.training = training
        for module, name, is_parameter, device in self.devices:
            if is_parameter:
                parameter = module._parameters[name]
                if parameter is not None and parameter.device != device:
                    parameter.data = parameter.data.to(device)  # the same Parameter object, as Module.to keeps it
            else:
                buffer = module._buffers[name]
                if buffer is not None and buffer.device != device:
                    module._buffers[name] = buffer.to(device)


@contextmanager
def lent(model: nn.Module, evaluate: bool = True, device: torch.device | None = None) -> Iterator[nn.Module]:
    """``model`` for the block (in eval mode when ``evaluate``: no dropout, batch norm on its running statistics,
    which then stay as they were), given back as it was lent however the block ends. ``device``: where the block
    will run it (None: anywhere); the devices of its tensors are kept unless the model is all there already."""
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    stays = device is not None and first is not None and first.device == device
    state = LentModel.of(model, devices_too=not stays)
    try:
        if evaluate:
            model.eval()
        yield model
    finally:
        state.give_back()
