"""A launch-bound PyTorch decode loop, for the GPU check's overhead item.

GPT-2 small (samples/pytorch/gpt2_small.py, random weights) generates tokens
one at a time for one sequence, greedily, recomputing a short context each
step: hundreds of small kernels per token, so the CPU's launch path, not the
GPU, sets the pace. After a warm-up it prints one line:

    decode: tokens N seconds S tokens_per_s T cpu_s C

With --kineto the timed tokens run under torch.profiler recording CUDA
activity only (Kineto's CUPTI client, no CPU ops): what PyTorch's own
profiler costs the same loop, beside gpuperf's figures.

usage: python3 decode_loop.py [--kineto] [TOKENS=200] [CONTEXT=32]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "pytorch"))
import torch  # noqa: E402
from gpt2_small import GPT, GPTConfig  # noqa: E402


def decode(model, ctx, tokens):
    out = ctx
    for _ in range(tokens):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            logits, _ = model(out[:, -ctx.shape[1]:])
        nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
    torch.cuda.synchronize()
    return out


def main():
    args = sys.argv[1:]
    kineto = "--kineto" in args
    args = [a for a in args if a != "--kineto"]
    tokens = int(args[0]) if len(args) > 0 else 200
    context = int(args[1]) if len(args) > 1 else 32
    if not torch.cuda.is_available():
        raise SystemExit("decode_loop.py: no usable CUDA device")
    torch.manual_seed(0)
    model = GPT(GPTConfig()).to("cuda").eval()
    ctx = torch.randint(0, GPTConfig().vocab_size, (1, context), device="cuda")
    decode(model, ctx, 5)  # warm-up: kernel selection, the caching allocator
    prof = None
    if kineto:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
    c, t = time.process_time(), time.perf_counter()
    decode(model, ctx, tokens)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    if prof is not None:
        prof.__exit__(None, None, None)
    print(f"decode: tokens {tokens} seconds {dt:.4f} tokens_per_s {tokens / dt:.2f} cpu_s {cpu:.4f}", flush=True)


if __name__ == "__main__":
    main()
