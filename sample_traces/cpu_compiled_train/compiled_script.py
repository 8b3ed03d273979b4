import torch, torch.nn as nn
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64); self.act = nn.GELU(); self.fc2 = nn.Linear(64, 32); self.norm = nn.LayerNorm(32)
    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2)); self.head = nn.Linear(32, 8)
    def forward(self, x):
        for b in self.blocks: x = b(x)
        return self.head(x)
m = Net()
cm = torch.compile(m)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(16, 32)
for _ in range(3):
    loss = cm(x).square().mean(); loss.backward(); opt.step(); opt.zero_grad()
print("ok", float(loss))
