"""Hookscope's version: a leaf module, so that the code that shows it imports nothing else of the package."""

__version__ = "0.1.0"
