"""Simulated CUDA (no GPU: kernels do not run): a small Hugging Face model's
decode loop, for sim/bench/hf_train.sh (LOOP=decode). The same GPT-2 as
hf_train.py (built from a config: random weights, 2 layers, nothing
downloaded), in eval mode under torch.inference_mode(), generating greedily
one token at a time with its KV cache, batch 1: the launch-bound loop of
serving a small model, where each token is one forward of a single position
(module __call__, the dispatcher, the cache's concatenations) and what a
launch costs the CPU is lost throughput.

Each token is model(input_ids=last_token, past_key_values=past,
use_cache=True) (the argument is `cache` from transformers 5.x on) and the argmax of its last logits, kept on the device (no
copy or synchronization per token). The loop starts from an 8-token prompt;
when the next token would not fit in n_positions, it starts again from the
prompt (one forward of the prompt gives the next token, and counts as one),
so that any number of tokens can be timed.

Runs WARMUP untimed tokens, then TOKENS timed ones, synchronized at the end.
Prints "tokens N cpu_per_step_us C wall_per_step_us W faults_per_step F" (a
step is a token, the names as hf_train.py's so that the script reads both
alike): C is the CPU time of the whole process (every thread) over the timed
tokens, per token, W the wall time per token, F its minor page faults per
token; then "timed_window A B": when the timed tokens began
and ended, in seconds of CLOCK_MONOTONIC (the clock `perf record -k
CLOCK_MONOTONIC` stamps samples with).
usage: python3 hf_decode.py WARMUP TOKENS"""
import inspect
import sys

import torch
from hf_model import gpt2, timed

warmup, tokens = (int(a) for a in sys.argv[1:3])
model, config = gpt2()
model.eval()
# transformers 5.x renamed past_key_values (argument and output) to cache and
# translates the old name at every call: the loop takes the name the installed
# version has, so that it times no such translation.
cache = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
prompt = torch.randint(0, config.vocab_size, (1, 8), device="cuda")
# The decoder's state: the KV cache, the last token (1 x 1, on the device) and
# the context's length once the next forward has added it.
past, last, length = None, None, 0


def token():
    global past, last, length
    if past is None or length > config.n_positions:
        out = model(input_ids=prompt, use_cache=True)
        length = prompt.shape[1] + 1
    else:
        out = model(input_ids=last, use_cache=True, **{cache: past})
        length += 1
    past = getattr(out, cache)
    last = out.logits[:, -1].argmax(dim=-1, keepdim=True)


with torch.inference_mode():
    timed("token", warmup, tokens, token)
