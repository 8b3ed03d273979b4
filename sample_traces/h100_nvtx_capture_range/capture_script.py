"""The capture stops inside NVTX ranges: cudaProfilerStart() inside `train`, cudaProfilerStop() inside the third
`step` (and inside the start/end range `session`), so nsys sees their starts and not their ends."""

import torch
from torch.cuda import nvtx

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
x = torch.randn(64, 256, device="cuda")
with torch.no_grad():
    model(x)  # warm-up, before the capture
torch.cuda.synchronize()
cudart = torch.cuda.cudart()
nvtx.range_push("train")
cudart.cudaProfilerStart()
session = nvtx.range_start("session")
with torch.no_grad():
    for step in range(3):
        nvtx.range_push("step")
        out = model(x)
        if step == 2:
            torch.cuda.synchronize()
            cudart.cudaProfilerStop()  # inside step, train and session
        nvtx.range_pop()
nvtx.range_end(session)
nvtx.range_pop()
print("sum", float(out.sum()))
