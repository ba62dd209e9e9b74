"""One model file for the tests of what a user's own model can do wrong (--model-file path.py:factory).

The failure tests of the command line, of the window and of the hostile-model checks write this text to a file and
name one of its factories.
"""

MODELS = '''
import sys

import torch
from torch import nn


class Small(nn.Module):
    def __init__(self, mode="fine"):
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        y = self.conv(x)
        if self.mode == "raises":
            raise ValueError("shapes do not match in my model")
        if self.mode == "exits":
            sys.exit(4)
        if self.mode == "inplace":
            y = y.sigmoid()
            y.mul_(2)  # sigmoid's backward needs its output: autograd refuses
        if self.mode == "overflow":
            y = y * 1e30 * 1e30  # finite weights, infinite values
        return self.fc(y.mean((2, 3)))


class Poisoned(nn.Module):
    """NaN made in the middle: conv1 is fine, boom's weights are NaN, conv2 reads its output."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.boom = nn.Conv2d(4, 4, 1)
        self.conv2 = nn.Conv2d(4, 4, 3)
        with torch.no_grad():
            self.boom.weight.fill_(float("nan"))

    def forward(self, x):
        return self.conv2(self.boom(self.conv1(x))).mean((2, 3))


def exits():
    raise SystemExit(3)


def raises():
    return Small("raises")


def exits_in_forward():
    return Small("exits")


def inplace():
    return Small("inplace")


def overflow():
    return Small("overflow")


def nan_weights():
    """One NaN weight of 40 in fc."""
    model = Small()
    with torch.no_grad():
        model.fc.weight[0, 0] = float("nan")
    return model


def nan_everywhere():
    """Every weight of fc NaN."""
    model = Small()
    with torch.no_grad():
        model.fc.weight.fill_(float("nan"))
    return model


def poisoned():
    return Poisoned()


def fine():
    return Small()
'''
