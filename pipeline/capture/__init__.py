"""Capture stage (GPU host): run a model under nsys, ncu and the PyTorch profiler with one range per module.

Nothing here imports torch at import time except where a function needs it, so
``tracepipe --help`` and the CPU-only pipeline never pay for (or need) it.
"""
