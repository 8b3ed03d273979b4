"""A small model's training loop with an NVTX range around every module call: the workload the nsys
benchmark (`bench_vs_nsys.py --capture`) profiles. Run it under nsys on a GPU host:

    nsys profile -t cuda,nvtx -o trace python benchmarks/train_nvtx.py --steps 750

Each step is `step` > `forward` (one range per nn.Module call, nested as the modules are: `layer1` >
`layer1.0` > `layer1.0.conv1`), `backward`, `optimizer`.  ResNet-18 on 16 x 3 x 64 x 64 images with SGD:
about 260 kernels per step on an H200, so 750 steps give ~200k kernels.
"""

from __future__ import annotations

import argparse

import torch
import torchvision
from torch.cuda import nvtx


def annotate(model: torch.nn.Module) -> None:
    """Push a range named by the module's qualified name before each call, pop it after."""
    for name, module in model.named_modules():
        label = name or "model"

        def pre(_m: torch.nn.Module, _inp: object, label: str = label) -> None:
            nvtx.range_push(label)  # a forward pre-hook must return None

        def post(_m: torch.nn.Module, _inp: object, _out: object) -> None:
            nvtx.range_pop()

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=750)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).cuda()
    annotate(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (args.batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(args.steps):
        with nvtx.range("step"):
            with nvtx.range("forward"):
                loss = loss_fn(model(x), y)
            with nvtx.range("backward"):
                loss.backward()
            with nvtx.range("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"trained {args.steps} steps, last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
