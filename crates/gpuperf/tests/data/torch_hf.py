"""A Hugging Face-style run for gpuperf's tests on the simulated runtime.

A GPT-2 model built from a config (random weights, 2 layers, nothing
downloaded), three AdamW steps under bf16 autocast with gradient clipping,
then a greedy decoding loop. With `--profile OUT`, the same run goes under
torch.profiler (CPU and CUDA activities, with_stack=True) and the trace is
exported to OUT, to compare what each tool shows of it.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def run():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4
    )
    model = GPT2LMHeadModel(config).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (2, 32), device="cuda")
    model.train()
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    # A hand-written greedy decoding loop. (`model.generate()` does not return
    # on the simulated runtime with transformers 5.24: not looked into yet.)
    model.eval()
    with torch.no_grad():
        out = ids[:, :8]
        for _ in range(4):
            logits = model(input_ids=out).logits
            out = torch.cat([out, logits[:, -1:].argmax(-1)], dim=1)
    torch.cuda.synchronize()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--profile":
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=acts, with_stack=True) as p:
            run()
        p.export_chrome_trace(sys.argv[2])
    else:
        run()
    print("torch", torch.__version__, "kernels ran on", torch.cuda.get_device_name(0))


if __name__ == "__main__":
    main()
