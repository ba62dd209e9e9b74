"""Hookscope: look inside a PyTorch network through real hooks."""

import os

__version__ = "0.1.0"

# How long PyTorch's OpenMP threads (GNU OpenMP: Linux) spin, waiting ready for the next operation, before they sleep.
# libgomp reads it once, when torch loads it, so it is set here, before any module of the app imports torch; a value
# the user set is kept. Its default, 300,000 turns (several milliseconds here), kept the model's idle thread spinning
# through everything between two runs of the window: the pictures of a run, the GUI thread's update and paint, the
# next frame's decoding all shared a core with it (the window's hand-over from one video frame to the next took 6 ms
# instead of 1.3). 30,000 turns still spans the gaps between one operation and the next inside a run: the model alone
# is as fast (python -m hookscope.ui.bench_live prints both; docs/live.md).
os.environ.setdefault("GOMP_SPINCOUNT", "30000")
