"""NVTX ranges left open when the program ends: a push/pop `train` range never popped and a start/end `session`
range never ended, around two annotated steps and a kernel after them. nsys records them with no end."""

import torch
import torch.nn.functional as F
from torch.cuda import nvtx

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
F.cross_entropy(model(x), y).backward()  # warm-up outside every range
torch.cuda.synchronize()

nvtx.range_push("train")
session = nvtx.range_start("session")
for step in range(2):
    nvtx.range_push("step")
    with torch.no_grad():
        out = model(x)
    nvtx.range_pop()
total = (out * 2).sum()  # inside train and session only
torch.cuda.synchronize()
print("sum", float(total))
