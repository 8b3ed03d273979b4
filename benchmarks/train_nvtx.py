"""A small model's training loop with an NVTX range around every module call: the workload the nsys
benchmark (`bench_vs_nsys.py --capture`) profiles. Run it under nsys on a GPU host:

    nsys profile -t cuda,nvtx -o trace python benchmarks/train_nvtx.py --steps 750
    nsys profile -t cuda,nvtx -o trace python benchmarks/train_nvtx.py --model gpt --steps 300

Each step is `step` > `forward` (one range per nn.Module call, nested as the modules are: `layer1` >
`layer1.0` > `layer1.0.conv1`), `backward`, `optimizer`.  ``--model resnet18``: ResNet-18 on 16 x 3 x 64 x 64
images with SGD: about 260 kernels per step on an H200, so 750 steps give ~200k kernels (231,000 on the H200 in
bench_vs_nsys_h200.txt). ``--model gpt``: a GPT-2-style Hugging Face model (``transformers.GPT2LMHeadModel``,
12 layers, width 256, 8 heads, 8192-token vocabulary, random init, no dropout), next-token loss on random tokens
(batch 8 x 128), AdamW: roughly 700 kernels a step, so ~300 steps give the ~220k kernels of #44's GPT export (the
count depends on the PyTorch and transformers versions; bench_vs_nsys prints it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
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


def resnet18(batch: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], torch.Tensor]]:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    return model, opt, lambda: loss_fn(model(x), y)


def gpt(batch: int, seq: int = 128) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], torch.Tensor]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=12, n_embd=256, n_head=8, vocab_size=8192, n_positions=seq,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (batch, seq), device="cuda")
    return model, opt, lambda: model(input_ids=tokens, labels=tokens).loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=750)
    ap.add_argument("--batch", type=int, default=None, help="default: 16 images (resnet18), 8 sequences (gpt)")
    ap.add_argument("--model", choices=("resnet18", "gpt"), default="resnet18")
    args = ap.parse_args()
    args.batch = args.batch or (8 if args.model == "gpt" else 16)
    torch.manual_seed(0)
    if args.model == "gpt":
        model, opt, compute_loss = gpt(args.batch)
    else:
        model, opt, compute_loss = resnet18(args.batch)
    annotate(model)
    for _ in range(args.steps):
        with nvtx.range("step"):
            with nvtx.range("forward"):
                loss = compute_loss()
            with nvtx.range("backward"):
                loss.backward()
            with nvtx.range("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"trained {args.steps} steps, last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
