# A user's own script, as `tracepipe capture ... -- python user_script.py` runs it: no tracepipe code in it.
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        return self.fc(self.pool(x).flatten(1))


m = Net().cuda().eval()
head = nn.Linear(10, 2).cuda()  # a second root module, called outside m
x = torch.randn(8, 3, 64, 64, device="cuda")
with torch.no_grad():
    for _ in range(2):
        y = head(m(x))
torch.cuda.synchronize()
print("user script ok", tuple(y.shape))
