#!/usr/bin/env python3
"""GPT-2 small in plain PyTorch, with random weights, as a workload to profile.

The model has GPT-2 small's shape (12 layers, 768 wide, 12 heads, vocabulary
50257, context 1024, 124 M parameters) written as ordinary nn.Modules: no
downloads, no transformers library. It runs a few steps in eager mode, then
the same steps through torch.compile, on CUDA, and prints the time per step.
By default a step is one inference forward pass; with --train it is a forward
pass, a backward pass and an AdamW step.

Host-side work goes through named functions (main -> run_mode -> run_steps ->
train_step / inference_step -> GPT.forward -> Block.forward -> ...), so that
Python frames in a CPU profile say which part of a step launched a kernel.

--profile-kineto OUT.json runs the timed steps under torch.profiler (CPU and
CUDA activities) and writes a summary of the GPU work, for comparing with
gpuperf's own per-kernel totals (--profile-trace OUT.pt.trace.json also writes
the profiler's own trace):

    {
      "format": "gpuperf-kineto-summary/1",
      "mode": "eager",            # or "compile"
      "train": false,
      "steps": 10,                # timed steps, all of them inside the profile
      "batch": 8, "seq": 512, "dtype": "bf16",
      "torch": "2.x.y",
      "time_field": "self_device_time_total",
      "kernels": [{"name": "...", "count": 120, "total_us": 1234.5}, ...],
      "memops":  [{"name": "Memcpy HtoD (Pageable -> Device)", "count": 1, "total_us": 2.0}, ...]
    }

Each entry is one row of prof.key_averages() whose device type is CUDA and
that is not a user annotation (torch.compile's ranges on the GPU timeline).
"name" is the kernel name as kineto reports it (demangled); "count" is the
number of launches; "total_us" is the row's self_device_time_total (in older
PyTorch self_cuda_time_total): the sum of the kernel durations on the GPU, in
microseconds. Copies and memsets ("Memcpy ...", "Memset ...") go to "memops"
instead of "kernels". Both lists are sorted by total_us, largest first.

The profile holds only the timed steps. Warm-up steps (--warmup) and the
model's set-up come before it; the weights are initialized on the CPU, so
set-up puts no kernels on the GPU (only copies of the weights and tokens). For
a comparison with a recording of the whole process, use --mode eager
--warmup 0: then the profile should hold every kernel the process launches.
"""

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    block_size: int = 1024


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2
        self.apply(self._init_weights)
        # GPT-2 scales the projections into the residual stream by 1/sqrt(2 · layers),
        # so the stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))
        return logits, loss


def autocast(dtype):
    """bf16 autocast, or a no-op context for fp32."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16")


def inference_step(model, idx, dtype):
    with torch.inference_mode(), autocast(dtype):
        logits, _ = model(idx)
    return logits


def train_step(model, opt, idx, targets, dtype):
    opt.zero_grad(set_to_none=True)
    with autocast(dtype):
        _, loss = model(idx, targets)
    loss.backward()
    opt.step()
    return loss


def run_steps(step, n):
    for _ in range(n):
        step()
    torch.cuda.synchronize()


def kineto_summary(prof):
    """Kernel and memory-operation totals from a finished torch.profiler run."""
    from torch.autograd import DeviceType

    kernels, memops = [], []
    for row in prof.key_averages():
        if row.device_type != DeviceType.CUDA or getattr(row, "is_user_annotation", False):
            continue
        total = getattr(row, "self_device_time_total", None)
        if total is None:  # PyTorch before the cuda -> device renaming
            total = row.self_cuda_time_total
        entry = {"name": row.key, "count": row.count, "total_us": round(float(total), 3)}
        (memops if row.key.startswith(("Memcpy", "Memset")) else kernels).append(entry)
    kernels.sort(key=lambda e: -e["total_us"])
    memops.sort(key=lambda e: -e["total_us"])
    return kernels, memops


def write_kineto_summary(path, prof, args, mode):
    kernels, memops = kineto_summary(prof)
    summary = {
        "format": "gpuperf-kineto-summary/1",
        "mode": mode,
        "train": args.train,
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "time_field": "self_device_time_total",
        "kernels": kernels,
        "memops": memops,
    }
    with open(path, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    gpu_ms = sum(k["total_us"] for k in kernels) / 1e3
    print(f"wrote {path}: {len(kernels)} kernels, {sum(k['count'] for k in kernels)} launches, "
          f"{gpu_ms:.1f} ms of kernel time", file=sys.stderr)


def run_mode(mode, model, opt, batch, args):
    """Warm-up steps, then the timed (and maybe profiled) steps, in one mode."""
    idx, targets = batch
    net = torch.compile(model) if mode == "compile" else model
    if args.train:
        def step():
            train_step(net, opt, idx, targets, args.dtype)
    else:
        def step():
            inference_step(net, idx, args.dtype)

    t0 = time.perf_counter()
    run_steps(step, args.warmup)  # compiles, in compile mode
    warm_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    if args.profile_kineto:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run_steps(step, args.steps)
    else:
        run_steps(step, args.steps)
    dt = time.perf_counter() - t0

    tokens = args.steps * args.batch * args.seq
    kind = "train" if args.train else "inference"
    print(f"{mode}: {args.warmup} warm-up steps in {warm_s:.1f} s; {args.steps} {kind} steps in "
          f"{dt * 1e3:.1f} ms ({dt * 1e3 / args.steps:.2f} ms/step, {tokens / dt:,.0f} tokens/s)")
    if args.profile_kineto:
        write_kineto_summary(args.profile_kineto, prof, args, mode)
        if args.profile_trace:
            prof.export_chrome_trace(args.profile_trace)
            print(f"wrote {args.profile_trace}: the profiler's own trace", file=sys.stderr)


def make_batch(cfg, args, device):
    """Random token ids, drawn on the CPU so that no kernel runs outside the steps."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=gen)
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="GPT-2 small (124 M parameters, random weights) in eager mode and under torch.compile.",
        epilog="examples:\n"
        "  gpt2_small.py                          # inference, eager then compile\n"
        "  gpt2_small.py --train --mode eager     # forward + backward + AdamW\n"
        "  gpt2_small.py --mode eager --warmup 0 --profile-kineto kineto.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode (default 10)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps before them; compile mode compiles here (default 3)")
    p.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    p.add_argument("--seq", type=int, default=512, help="tokens per sequence, at most 1024 (default 512)")
    p.add_argument("--mode", choices=["eager", "compile", "both"], default="both",
                   help="eager, torch.compile, or eager then compile (default both)")
    p.add_argument("--train", action="store_true",
                   help="train steps (forward, backward, AdamW) instead of inference")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="bf16 autocast or plain fp32 (default bf16)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and tokens (default 0)")
    p.add_argument("--profile-kineto", metavar="OUT.json",
                   help="profile the timed steps with torch.profiler and write a kernel summary "
                   "(format in this script's docstring); needs --mode eager or compile")
    p.add_argument("--profile-trace", metavar="OUT.pt.trace.json",
                   help="with --profile-kineto, also write the profiler's trace (Chrome JSON, "
                   "as torch.profiler exports it; `gpuperf merge` reads it)")
    args = p.parse_args(argv)
    if args.profile_trace and not args.profile_kineto:
        p.error("--profile-trace needs --profile-kineto")
    if args.steps < 1 or args.batch < 1 or args.warmup < 0:
        p.error("--steps and --batch must be at least 1, --warmup at least 0")
    if not 1 <= args.seq <= GPTConfig.block_size:
        p.error(f"--seq must be from 1 to {GPTConfig.block_size}")
    if args.profile_kineto and args.mode == "both":
        p.error("--profile-kineto profiles one mode: add --mode eager or --mode compile")
    if args.mode != "eager" and args.warmup == 0:
        print("gpt2_small: --warmup 0 in compile mode: the first timed step compiles", file=sys.stderr)
    return args


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpt2_small: no CUDA device available to PyTorch", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    cfg = GPTConfig()
    model = GPT(cfg).to(device)
    if args.train:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    else:
        model.eval()
        opt = None
    batch = make_batch(cfg, args, device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"gpt2_small: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
          f"{n_params / 1e6:.1f} M parameters, batch {args.batch} x {args.seq} tokens, {args.dtype}")
    for mode in ["eager", "compile"] if args.mode == "both" else [args.mode]:
        run_mode(mode, model, opt, batch, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
