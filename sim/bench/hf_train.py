"""Simulated CUDA (no GPU: kernels do not run): a small Hugging Face model's
training loop, for sim/bench/hf_train.sh. GPT-2 built from a config (random
weights, 2 layers, nothing downloaded), AdamW steps under bf16 autocast with
gradient clipping: the code path of a real training step (module __call__,
autocast, the dispatcher, autograd) at its real depth.

Runs WARMUP untimed steps, then STEPS timed ones, synchronized at the end.
Prints "steps S cpu_per_step_us C wall_per_step_us W": C is the CPU time of
the whole process (every thread) over the timed steps, per step; then
"timed_window A B": when the timed steps began and ended, in seconds of
CLOCK_MONOTONIC (the clock `perf record -k CLOCK_MONOTONIC` stamps samples
with).
usage: python3 hf_train.py WARMUP STEPS"""
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

warmup, steps = (int(a) for a in sys.argv[1:3])
torch.manual_seed(0)
config = GPT2Config(
    vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
)
model = GPT2LMHeadModel(config).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, config.vocab_size, (2, 32), device="cuda")
model.train()


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for _ in range(warmup):
    step()
torch.cuda.synchronize()
c = time.process_time()
t = time.perf_counter()
start = time.clock_gettime(time.CLOCK_MONOTONIC)
for _ in range(steps):
    step()
torch.cuda.synchronize()
wall = time.perf_counter() - t
cpu = time.process_time() - c
end = time.clock_gettime(time.CLOCK_MONOTONIC)
print("steps %d cpu_per_step_us %.1f wall_per_step_us %.1f"
      % (steps, cpu * 1e6 / max(steps, 1), wall * 1e6 / max(steps, 1)))
print("timed_window %.6f %.6f" % (start, end))
