"""FP32 GEMMs on the CUDA cores against the same GEMMs with TF32 (tensor cores) and bf16, on a GPU host.

The fp32_no_tensor_cores finding puts half of an FP32 GEMM's time at stake (``tensor_core_speedup`` = 2 in
pipeline/analyze/finding_rules.py).  This measures, for the GEMM shapes of the committed transformer sample
(``sample_traces/h200_transformer``: TransformerEncoderLayer d_model 512, ffn 2048, 128 x 8 tokens) and a few
others, the time per product with ``torch.backends.cuda.matmul.allow_tf32`` off and on and under bf16: the
ratio the threshold should not exceed.  CUDA events around 50 products after 10 warm-ups, median of 5 rounds.

    python benchmarks/tf32_speedup.py            # prints the table; the header names commit and machine
"""

from __future__ import annotations

import os
import platform
import statistics
import sys

import torch

#: (label, M, K, N): C[M, N] = A[M, K] @ B[K, N]
SHAPES = [
    ("transformer in_proj (1024x512 @ 512x1536)", 1024, 512, 1536),
    ("transformer linear1 (1024x512 @ 512x2048)", 1024, 512, 2048),
    ("transformer linear2 (1024x2048 @ 2048x512)", 1024, 2048, 512),
    ("transformer out_proj (1024x512 @ 512x512)", 1024, 512, 512),
    ("square 4096", 4096, 4096, 4096),
]


def time_matmul(a: torch.Tensor, b: torch.Tensor, reps: int = 50, rounds: int = 5) -> float:
    """Median over rounds of the mean µs per product."""
    for _ in range(10):
        a @ b
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(times)


def main() -> int:
    dev = torch.cuda.get_device_name(0)
    print(f"# command: python benchmarks/tf32_speedup.py; commit {os.environ.get('TRACEPIPE_COMMIT', '?')}")
    print(f"# machine: {dev}, torch {torch.__version__}, {platform.node()}")
    print(f"{'shape':46} {'fp32 µs':>9} {'tf32 µs':>9} {'bf16 µs':>9} {'fp32/tf32':>10} {'fp32/bf16':>10}")
    for label, m, k, n in SHAPES:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = time_matmul(a, b)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = time_matmul(a, b)
        torch.backends.cuda.matmul.allow_tf32 = False
        bf16 = time_matmul(a.bfloat16(), b.bfloat16())
        print(f"{label:46} {fp32:9.1f} {tf32:9.1f} {bf16:9.1f} {fp32 / tf32:10.2f} {fp32 / bf16:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
