"""A training loop profiled the way HTA's users profile theirs: `torch.profiler` around a few steps, no per-module
ranges (only the profiler's own `ProfilerStep#N`), optionally with memory events (`profile_memory`, as HTA's own
NCCL trace has them), input shapes and Python stacks.  It makes real chrome traces of a chosen size for #18.4's
"real 50-100 MB traces" on a GPU host:

    python benchmarks/train_profiled.py --model gpt --target-mb 75 --memory -o gpt_mem.json.gz

``--target-mb``: profile 2 steps first, then as many steps as make the JSON about that large (the trace grows
linearly with steps).  Models: ``gpt`` (a 12-layer decoder-only transformer LM built from
nn.TransformerEncoderLayer, causal mask, AdamW), or any torchvision classifier by name (``vit_b_16``,
``mobilenet_v3_large``, ``resnet50``: cross-entropy on random images, AdamW).
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import shutil
import tempfile
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


class TinyGPT(torch.nn.Module):
    """Token embedding, learned positions, pre-norm decoder blocks (causal self-attention + MLP), LM head."""

    def __init__(self, vocab: int = 32000, d: int = 768, layers: int = 12, heads: int = 12, seq: int = 256) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.zeros(seq, d))
        block = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, 0.0, "gelu", batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        x = self.tok(ids) + self.pos[:n]
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))


def training_step(model_name: str, batch: int, dev: str) -> Callable[[], None]:
    """One forward, loss, backward and AdamW step of the named model on fixed random inputs."""
    if model_name == "gpt":
        model = TinyGPT().to(dev)
        ids = torch.randint(0, 32000, (batch, 256), device=dev)

        def loss() -> torch.Tensor:
            logits = model(ids[:, :-1])
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))

    else:
        import torchvision  # the GPU host has it; the gpt model needs only torch

        model = getattr(torchvision.models, model_name)(num_classes=1000).to(dev)
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)

        def loss() -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(x), y)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        loss().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def sync(dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def profiled(step: Callable[[], None], steps: int, args: argparse.Namespace, path: str) -> int:
    """Profile ``steps`` steps into the chrome trace ``path``; return its size in bytes."""
    with profile(
        activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else []),
        record_shapes=args.shapes,
        profile_memory=args.memory,
        with_stack=args.stack,
    ) as prof:
        for _ in range(steps):
            step()
            prof.step()
        sync(args.device)
    prof.export_chrome_trace(path)
    return os.path.getsize(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=0, help="measured steps (default: from --target-mb)")
    ap.add_argument("--target-mb", type=float, default=75.0)
    ap.add_argument("--memory", action="store_true", help="profile_memory=True")
    ap.add_argument("--shapes", action="store_true", help="record_shapes=True")
    ap.add_argument("--stack", action="store_true", help="with_stack=True")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script")
    ap.add_argument("-o", "--out", required=True, help="the trace, gzipped (.json.gz)")
    args = ap.parse_args()
    torch.manual_seed(0)
    step = training_step(args.model, args.batch, args.device)
    for _ in range(3):
        step()
    sync(args.device)
    tmp = tempfile.mkdtemp(prefix="train-profiled-")
    raw = os.path.join(tmp, "trace.json")
    steps = args.steps
    if not steps:
        per_step = profiled(step, 2, args, raw) / 2
        steps = max(1, math.floor(args.target_mb * 1e6 / per_step))
    size = profiled(step, steps, args, raw)
    with open(raw, "rb") as src, gzip.open(args.out, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp)
    print(f"{args.out}: {args.model} batch {args.batch}, {steps} steps, {size / 1e6:.1f} MB JSON")


if __name__ == "__main__":
    main()
