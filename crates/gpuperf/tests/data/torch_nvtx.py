"""NVTX ranges in a training run: each step in torch.cuda.nvtx.range("train_step"),
its forward in "forward" and its backward in "backward" (the backward's kernels
run on autograd's thread, outside the main thread's ranges); the model is
built outside every range."""
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).cuda()


def forward(model, x):
    return model(x).square().mean()


def train(model, opt, x):
    with torch.cuda.nvtx.range("train_step"):
        with torch.cuda.nvtx.range("forward"):
            loss = forward(model, x)
        with torch.cuda.nvtx.range("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad()


model = build()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda")
for _ in range(2):
    train(model, opt, x)
torch.cuda.synchronize()
print("nvtx script done")
