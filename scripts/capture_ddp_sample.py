"""Capture sample_traces/h100_ddp_2rank: two ranks of one data-parallel training job, one PyTorch trace each.

Run on a GPU host (torch, triton): ``python scripts/capture_ddp_sample.py OUT``.  Both ranks share one GPU (the
lent machine had one) and a gloo process group, so ``distributedInfo`` names rank and world size and the
trace files are ``OUT/rank0.json.gz`` and ``OUT/rank1.json.gz``: one job as tracepipe's rank_jobs groups it.

What the job does, so that each findings rule has something real to find:

* rank 1 gets twice the tokens of rank 0 (an uneven shard): it straggles on every layer (straggler_rank);
* the batch is copied from pageable host memory inside each profiled step, and the gradients go through the
  host for gloo's all-reduce (pageable_h2d_copy);
* FP32 Linear layers with PyTorch's default matmul precision, no TF32 (fp32_no_tensor_cores);
* an nn.Embedding whose backward scatters the gradient of repeated tokens (slow_backward);
* a Triton row-normalisation written with one warp per row and a 8192-wide block, so each thread holds 256
  values in registers (low_occupancy, limited by registers);
* a small model and batch, so most kernels run shorter than the host takes to launch them (launch_bound).

Every module call is a ``record_function`` range named by its qualified name (pipeline.capture.annotate), so
the layers are the model's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import triton
import triton.language as tl
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.capture.annotate import ModelAnnotator, RangeBackend

VOCAB, D_MODEL, HIDDEN, WIDE = 8192, 256, 1024, 8192
TOKENS = {0: 2048, 1: 4096}  # rank 1's shard is twice rank 0's


@triton.jit
def _rownorm_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr) -> None:
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    tl.store(y_ptr + row * n_cols + cols, d / tl.sqrt(var + 1e-5), mask=mask)


class RowNorm(nn.Module):
    """Normalises each row of a (rows, WIDE) tensor with a Triton kernel of one warp per row (forward only)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _rownorm_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=WIDE, num_warps=1)
        return y


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.fc1 = nn.Linear(D_MODEL, HIDDEN)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(HIDDEN, D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB)
        self.norm = RowNorm()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        h = h + self.fc2(self.act(self.fc1(h)))
        logits = self.head(h)
        # a side statistic through the Triton kernel (no gradient): rows of WIDE logits
        self.norm(logits.detach().reshape(-1, WIDE))
        return logits


def run(rank: int, world: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = TinyLM().cuda()
    ModelAnnotator(model, RangeBackend(use_nvtx=False, use_record_function=True), root_name="model")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    # pageable host batches (no pin_memory): copied inside each step
    batches = [torch.randint(0, VOCAB, (TOKENS[rank],), generator=gen) for _ in range(8)]

    def step(i: int) -> None:
        ids = batches[i % len(batches)].to("cuda")
        logits = model(ids)
        loss = nn.functional.cross_entropy(logits, ids)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads]).cpu()
        dist.all_reduce(flat)  # gloo, on the host
        flat = (flat / world).to("cuda")
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        opt.step()
        opt.zero_grad(set_to_none=False)

    for i in range(3):  # warm-up outside the profile: cuBLAS handles, Triton's compile
        step(i)
    torch.cuda.synchronize()
    dist.barrier()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    export = lambda p: p.export_chrome_trace(str(out / f"rank{rank}.json"))  # noqa: E731
    with torch.profiler.profile(activities=acts, schedule=schedule, on_trace_ready=export) as prof:
        for i in range(5):
            step(i)
            torch.cuda.synchronize()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(run, args=(2, out), nprocs=2, join=True)
    import gzip
    import shutil

    for r in (0, 1):
        src = out / f"rank{r}.json"
        with src.open("rb") as f, gzip.open(out / f"rank{r}.json.gz", "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        src.unlink()
    print("torch", torch.__version__, "triton", triton.__version__, "gpu", torch.cuda.get_device_name(0))


if __name__ == "__main__":
    main()
