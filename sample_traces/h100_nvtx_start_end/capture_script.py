"""NVTX start/end ranges and marks around a small training loop, as a user annotates with torch.cuda.nvtx.

Captured for tracepipe's sample_traces/h100_nvtx_start_end (README there). Kernels are launched:
- inside push/pop ranges (step/forward/backward/optimizer) and start/end ranges at once (`epoch` spans all; `load`
  starts inside `step` and ends inside `forward`): the innermost push/pop range is the layer;
- inside start/end ranges only (`between_steps`, nested in `epoch`; the latest started wins);
- on a second thread, inside its own start/end range (`worker_job`);
`epoch` is started on the main thread and ended on another: start/end ranges may end on any thread.
A mark (`step N begins`) opens each step. STEPS (environment) steps, default 3.
"""

import os
import threading

import torch
import torch.nn.functional as F
from torch.cuda import nvtx

steps = int(os.environ.get("STEPS", "3"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
F.cross_entropy(model(x), y).backward()  # warm-up: cuBLAS handles and workspaces outside the annotated region
opt.zero_grad()
torch.cuda.synchronize()

epoch = nvtx.range_start("epoch")
for step in range(steps):
    nvtx.mark(f"step {step} begins")
    nvtx.range_push("step")
    load = nvtx.range_start("load")
    xb = x * 1.0
    nvtx.range_push("forward")
    nvtx.range_end(load)
    loss = F.cross_entropy(model(xb), y)
    nvtx.range_pop()
    nvtx.range_push("backward")
    loss.backward()
    nvtx.range_pop()
    nvtx.range_push("optimizer")
    opt.step()
    opt.zero_grad()
    nvtx.range_pop()
    nvtx.range_pop()
    between = nvtx.range_start("between_steps")
    total = xb.sum()
    nvtx.range_end(between)
torch.cuda.synchronize()
ender = threading.Thread(target=nvtx.range_end, args=(epoch,))
ender.start()
ender.join()


def worker() -> None:
    job = nvtx.range_start("worker_job")
    (x @ x.T).relu_()
    nvtx.range_end(job)
    torch.cuda.synchronize()


w = threading.Thread(target=worker)
w.start()
w.join()
nvtx.mark("done")
print("loss", float(loss), "sum", float(total))
