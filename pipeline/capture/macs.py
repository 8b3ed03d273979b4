"""Analytic multiply-accumulate counts (MACs) of a module call, from shapes alone.

A MAC is one ``a * b + c``; FLOPs are about twice the MACs.  What is counted is
the matrix-product work a GPU does on its FMA or tensor pipes: convolutions,
linear layers, matrix products and attention.  Everything else (activations,
pooling, normalization, dropout, residual adds, softmax) counts as 0 MACs: its
arithmetic is elementwise, bound by memory, and would be misleading next to the
measured FMA/tensor counts that ``sql/layer_macs.sql`` compares these with.

The pure functions take plain shapes (tuples of ints) so they can be checked by
hand; ``module_macs`` maps a module call onto them.  A module type it does not
know (and that is not a known 0-MAC type) gives ``None``: unknown, not zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Shape = Sequence[int]


def conv_macs(batch: int, c_in: int, c_out: int, out_spatial: Shape, kernel: Shape, groups: int = 1) -> int:
    """Conv1d/2d/3d: ``N * C_out * prod(out spatial) * (C_in / groups) * prod(kernel)``.

    Stride, padding and dilation enter through ``out_spatial`` (``module_macs`` takes it from the output
    that ran, so every padding mode is exact).
    """
    if c_in % groups:
        raise ValueError(f"C_in={c_in} is not divisible by groups={groups}")
    return batch * c_out * math.prod(out_spatial) * (c_in // groups) * math.prod(kernel)


def conv_transpose_macs(batch: int, c_in: int, c_out: int, in_spatial: Shape, kernel: Shape, groups: int = 1) -> int:
    """ConvTranspose: every input element is scattered through ``(C_out / groups) * prod(kernel)`` weights."""
    return batch * c_in * math.prod(in_spatial) * (c_out // groups) * math.prod(kernel)


def linear_macs(input_shape: Shape, in_features: int, out_features: int) -> int:
    """Linear over all leading dims: ``prod(leading) * in * out``."""
    if not input_shape or input_shape[-1] != in_features:
        raise ValueError(f"input {tuple(input_shape)} does not end in in_features={in_features}")
    return math.prod(input_shape[:-1]) * in_features * out_features


def mha_macs(
    query: Shape,
    key: Shape,
    value: Shape,
    embed_dim: int,
    num_heads: int,
    batch_first: bool = False,
    kdim: int | None = None,
    vdim: int | None = None,
) -> int:
    """``nn.MultiheadAttention``: Q/K/V input projections, both attention products, output projection.

    With batch N, target length L, source length S and embedding E (heads split E,
    so the attention products do not depend on the head count)::

        N * (L*E*E + S*kdim*E + S*vdim*E   # in-projections
             + 2*L*S*E                     # Q K^T and P V
             + L*E*E)                      # out_proj
    """
    kdim = kdim or embed_dim
    vdim = vdim or embed_dim
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
    if len(query) == 2:  # unbatched (L, E)
        n, length, s = 1, query[0], key[0]
    elif batch_first:
        n, length, s = query[0], query[1], key[1]
    else:
        n, length, s = query[1], query[0], key[0]
    e = embed_dim
    return n * (length * e * e + s * kdim * e + s * vdim * e + 2 * length * s * e + length * e * e)


#: Module types whose own arithmetic is elementwise or a reduction: 0 MACs by the rule above.
ZERO_MAC_TYPES = frozenset(
    {
        *(f"{a}Pool{d}d" for a in ("Max", "Avg", "AdaptiveMax", "AdaptiveAvg", "LP", "Fractional") for d in (1, 2, 3)),
        *(f"MaxUnpool{d}d" for d in (1, 2, 3)),
        *(f"BatchNorm{d}d" for d in (1, 2, 3)),
        *(f"InstanceNorm{d}d" for d in (1, 2, 3)),
        *(f"LazyBatchNorm{d}d" for d in (1, 2, 3)),
        "SyncBatchNorm",
        "LayerNorm",
        "GroupNorm",
        "RMSNorm",
        "LocalResponseNorm",
        "ReLU",
        "ReLU6",
        "LeakyReLU",
        "PReLU",
        "RReLU",
        "ELU",
        "SELU",
        "CELU",
        "GELU",
        "SiLU",
        "Mish",
        "Sigmoid",
        "Tanh",
        "Hardtanh",
        "Hardswish",
        "Hardsigmoid",
        "Softplus",
        "Softsign",
        "Softshrink",
        "Hardshrink",
        "Tanhshrink",
        "Threshold",
        "GLU",
        "LogSigmoid",
        "Softmax",
        "Softmax2d",
        "LogSoftmax",
        "Softmin",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "FeatureAlphaDropout",
        "Identity",
        "Flatten",
        "Unflatten",
        "Upsample",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "PixelShuffle",
        "PixelUnshuffle",
        "ZeroPad1d",
        "ZeroPad2d",
        "ZeroPad3d",
        "ConstantPad1d",
        "ConstantPad2d",
        "ConstantPad3d",
        "ReflectionPad1d",
        "ReflectionPad2d",
        "ReplicationPad2d",
        "Embedding",
        "EmbeddingBag",
        # Pure containers: their own forward only calls their children.
        "Sequential",
        "ModuleList",
        "ModuleDict",
    }
)


def _shape(x: Any) -> tuple[int, ...] | None:
    shape = getattr(x, "shape", None)
    return tuple(int(d) for d in shape) if shape is not None else None


def module_macs(module: Any, args: Sequence[Any], kwargs: dict[str, Any] | None, output: Any) -> int | None:
    """The module's own analytic MACs for one call, or ``None`` for a type not analysed.

    ``output`` is used for convolutions so that any padding mode (``'same'``,
    asymmetric) is handled exactly: the output spatial size is what ran.
    """
    kind = type(module).__name__
    kwargs = kwargs or {}
    x = _shape(args[0]) if args else None
    out = _shape(output[0] if isinstance(output, tuple) else output)
    if kind in ("Conv1d", "Conv2d", "Conv3d", "LazyConv1d", "LazyConv2d", "LazyConv3d"):
        if x is None or out is None:
            return None
        spatial = len(module.kernel_size)
        batch = math.prod(x[: len(x) - spatial - 1]) if len(x) > spatial + 1 else 1  # unbatched input: N = 1
        return conv_macs(
            batch, module.in_channels, module.out_channels, out[-spatial:], module.kernel_size, module.groups
        )
    if kind in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
        if x is None:
            return None
        spatial = len(module.kernel_size)
        batch = math.prod(x[: len(x) - spatial - 1]) if len(x) > spatial + 1 else 1
        return conv_transpose_macs(
            batch, module.in_channels, module.out_channels, x[-spatial:], module.kernel_size, module.groups
        )
    if kind in ("Linear", "LazyLinear", "NonDynamicallyQuantizableLinear"):
        return linear_macs(x, module.in_features, module.out_features) if x is not None else None
    if kind == "Bilinear":
        return math.prod(x[:-1]) * module.in1_features * module.in2_features * module.out_features if x else None
    if kind == "MultiheadAttention":
        q = x if x is not None else _shape(kwargs.get("query"))
        k = _shape(args[1]) if len(args) > 1 else _shape(kwargs.get("key"))
        v = _shape(args[2]) if len(args) > 2 else _shape(kwargs.get("value"))
        if q is None or k is None or v is None:
            return None
        return mha_macs(q, k, v, module.embed_dim, module.num_heads, module.batch_first, module.kdim, module.vdim)
    if kind in ZERO_MAC_TYPES:
        return 0
    return None
