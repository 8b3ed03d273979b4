"""tracepipe: which GPU kernels each PyTorch layer launches, and how they land on the SMs."""

__version__ = "0.1.0"
