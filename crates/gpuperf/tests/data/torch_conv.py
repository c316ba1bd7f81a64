"""A script that uses cuDNN by default (a convolution, attention) and knows
nothing of the simulation: gpuperf's tests run it unchanged through sim/run.sh."""

import torch

x = torch.randn(2, 3, 32, 32, device="cuda")
conv = torch.nn.Conv2d(3, 8, 3).cuda()
y = conv(x)
q = torch.randn(1, 2, 64, 32, device="cuda", dtype=torch.bfloat16)
a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
torch.cuda.synchronize()
print("conv", tuple(y.shape), "attention", tuple(a.shape), "cudnn enabled", torch.backends.cudnn.enabled)
