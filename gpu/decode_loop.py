"""A launch-bound PyTorch decode loop, for the GPU check's overhead item.

GPT-2 small (samples/pytorch/gpt2_small.py, random weights) generates tokens
one at a time for one sequence, greedily, recomputing a short context each
step: hundreds of small kernels per token, so the CPU's launch path, not the
GPU, sets the pace. After a warm-up it prints one line:

    decode: tokens N seconds S tokens_per_s T cpu_s C

With --kineto the timed tokens run under torch.profiler recording CUDA
activity only (Kineto's CUPTI client, no CPU ops): what PyTorch's own
profiler costs the same loop, beside gpuperf's figures.

With --interleave B, run under `gpuperf record` (stacks on), the timed
tokens run in pairs of blocks of B tokens with gpuperf's stacks off in one
block and on in the other (sim/bench/interleave.py: one process, so both
halves see the machine at one speed), and it prints instead:

    decode-interleaved: interleaved tokens P block B thread_off_us ...
    stacks_on_tokens R

usage: python3 decode_loop.py [--kineto | --interleave B] [TOKENS=200] [CONTEXT=32]
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "samples", "pytorch"))
sys.path.insert(0, os.path.join(HERE, "..", "sim", "bench"))
import torch  # noqa: E402
from gpt2_small import GPT, GPTConfig  # noqa: E402

WARMUP = 5


def step(model, out, context):
    """One token: the model over the last CONTEXT tokens, the argmax
    appended."""
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits, _ = model(out[:, -context:])
    nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
    return torch.cat([out, nxt], dim=1)


def decode(model, ctx, tokens):
    out = ctx
    for _ in range(tokens):
        out = step(model, out, ctx.shape[1])
    torch.cuda.synchronize()
    return out


def interleaved(model, ctx, tokens, block):
    import interleave

    state = {"out": ctx}

    def one():
        state["out"] = step(model, state["out"], ctx.shape[1])

    r = interleave.blocks(one, tokens, block, torch.cuda.synchronize)
    print("decode-interleaved: %s stacks_on_tokens %d" % (interleave.line("token", r),
                                                          WARMUP + r["pairs"] * block), flush=True)


def main():
    args = sys.argv[1:]
    kineto = "--kineto" in args
    args = [a for a in args if a != "--kineto"]
    block = None
    if "--interleave" in args:
        i = args.index("--interleave")
        try:
            block = int(args[i + 1])
        except (IndexError, ValueError):
            raise SystemExit("decode_loop.py: --interleave needs a block size (tokens)")
        del args[i:i + 2]
    tokens = int(args[0]) if len(args) > 0 else 200
    context = int(args[1]) if len(args) > 1 else 32
    if not torch.cuda.is_available():
        raise SystemExit("decode_loop.py: no usable CUDA device")
    torch.manual_seed(0)
    model = GPT(GPTConfig()).to("cuda").eval()
    ctx = torch.randint(0, GPTConfig().vocab_size, (1, context), device="cuda")
    decode(model, ctx, WARMUP)  # warm-up: kernel selection, the caching allocator
    if block is not None:
        interleaved(model, ctx, tokens, block)
        return
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
