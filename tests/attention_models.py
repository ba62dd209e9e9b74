"""Attention modules the tests build: one whose weights can never be read exactly."""

import torch
from torch import nn


class OpaqueAttention(nn.Module):
    """A custom attention whose weights never appear as a softmax (a stand-in for a kernel with no eager form)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).sigmoid() * x
