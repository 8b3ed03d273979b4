# Three small matmuls on tensor cores (fp16, bf16, tf32) with known MAC counts,
# to check which ncu tensor metric counts MACs: M*N*K = 512*256*128 = 16,777,216 each.
import torch

torch.manual_seed(0)
M, K, N = 512, 256, 128
torch.backends.cuda.matmul.allow_tf32 = True
for dtype in (torch.half, torch.bfloat16, torch.float32):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    torch.cuda.synchronize()
    c = a @ b
    torch.cuda.synchronize()
print("ok")
