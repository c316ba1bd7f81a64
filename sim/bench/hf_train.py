"""Simulated CUDA (no GPU: kernels do not run): a small Hugging Face model's
training loop, for sim/bench/hf_train.sh. GPT-2 built from a config (random
weights, 2 layers, nothing downloaded), AdamW steps under bf16 autocast with
gradient clipping: the code path of a real training step (module __call__,
autocast, the dispatcher, autograd) at its real depth.

Runs WARMUP untimed steps, then STEPS timed ones, synchronized at the end.
Prints "steps S cpu_per_step_us C wall_per_step_us W faults_per_step F": C is
the CPU time of the whole process (every thread) over the timed steps, per
step, F its minor page faults per step (hf_model.timed); then
"timed_window A B": when the timed steps began and ended, in seconds of
CLOCK_MONOTONIC (the clock `perf record -k CLOCK_MONOTONIC` stamps samples
with).
usage: python3 hf_train.py WARMUP STEPS"""
import sys

import torch
from hf_model import gpt2, timed

warmup, steps = (int(a) for a in sys.argv[1:3])
model, config = gpt2()
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


timed("step", warmup, steps, step)
