"""A training step, then `abort` when GPUPERF_TEST_ABORT=1 (as a failed C++
check or PyTorch 2.14's exit race ends a program), else a normal exit."""
import os

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda")
model(x).square().mean().backward()
opt.step()
torch.cuda.synchronize()
print("step done", flush=True)
if os.environ.get("GPUPERF_TEST_ABORT") == "1":
    os.abort()
