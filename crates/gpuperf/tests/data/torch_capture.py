"""A training run in miniature for capture windows: the model is built and a
first step run outside the window; three steps run inside it (between
torch.cuda.profiler.start() and stop(), each in an NVTX range "train_step");
one more step after it."""
import torch


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).cuda()


def step(model, opt, x):
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


def first_step(model, opt, x):
    step(model, opt, x)


def window_step(model, opt, x):
    step(model, opt, x)


def after_step(model, opt, x):
    step(model, opt, x)


model = build()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda")
first_step(model, opt, x)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for _ in range(3):
    with torch.cuda.nvtx.range("train_step"):
        window_step(model, opt, x)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
after_step(model, opt, x)
torch.cuda.synchronize()
print("capture script done")
