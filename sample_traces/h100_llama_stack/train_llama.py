# A user's own training script: a small Hugging Face Llama (random init), its own loop, AdamW, bf16.
import argparse
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--compile", default="", help="'' (eager), default, reduce-overhead")
p.add_argument("--device", default="cuda")
p.add_argument("--profile", default="", help="write a torch.profiler trace (with_stack) of the last step here")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--provenance", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
if args.provenance:
    import torch._inductor.config as ic

    ic.trace.provenance_tracking_level = 1
cfg = LlamaConfig(
    vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=args.layers,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
)
cfg._attn_implementation = "sdpa"
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
model = LlamaForCausalLM(cfg).to(args.device, dtype)
model.train()
if args.compile:
    model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step():
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device=args.device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(args.steps - (1 if args.profile else 0)):
    step()
if args.device == "cuda":
    torch.cuda.synchronize()
if args.profile:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=acts, with_stack=True, record_shapes=True) as prof:
        step()
        if args.device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(args.profile)
print("done", os.getpid())
