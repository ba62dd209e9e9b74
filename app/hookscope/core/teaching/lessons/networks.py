"""The built-in networks the lessons fall back on, and the Python that builds a model for a lesson's code.

The tiny network (y = 2 x) gives the exact small numbers a tensor hook's lesson shows (2 x 1.6 = 3.2); the small
CNN has every module a lesson needs (an in-place ReLU after a BatchNorm, a container, a head), for a model that
lacks one.
"""

from __future__ import annotations

import keyword
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from hookscope.core.teaching.snippets import literal, one_line

TINY_INPUT = 1.0
TINY_WEIGHT = 2.0


TINY_CODE = f"""from torch import nn

model = nn.Sequential()
model.add_module("times2", nn.Linear(1, 1, bias=False))
with torch.no_grad():
    model.times2.weight.fill_({TINY_WEIGHT})  # y = 2 x: dy/dx = 2"""


def tiny_network() -> nn.Module:
    """y = 2 x: one Linear(1, 1) without bias, its weight 2, so that every gradient is a small exact number."""
    times2 = nn.Linear(1, 1, bias=False)
    model = nn.Sequential()
    model.add_module("times2", times2)
    with torch.no_grad():
        times2.weight.fill_(TINY_WEIGHT)
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
