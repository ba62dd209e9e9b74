"""Hookscope: look inside a PyTorch network through real hooks."""

__version__ = "0.1.0"
