# A user's own training script, as `tracepipe capture <tool> -o DIR -- python train.py` runs it: no tracepipe
# code in it. A small Hugging Face Llama (random init from a config: no download), its own loop, AdamW, bf16.
import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--compile", default="", help="torch.compile mode: default, reduce-overhead (empty: eager)")
p.add_argument("--layers", type=int, default=4)
args = p.parse_args()

torch.manual_seed(0)
cfg = LlamaConfig(
    vocab_size=1024,
    hidden_size=512,
    intermediate_size=1024,
    num_hidden_layers=args.layers,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=256,
)
cfg._attn_implementation = "sdpa"
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16)
model.train()
if args.compile:
    model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

for step in range(args.steps):
    ids = torch.randint(0, cfg.vocab_size, (4, 128), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print("trained", args.steps, "steps, loss", float(loss))
