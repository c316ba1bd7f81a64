"""A CUDA backward on another thread, then on the main thread, then exit. Prints
whether this PyTorch stashes a context for each backward, and whether each
thread still holds its last one: the runner keeps the main thread's (so the
autograd device thread never frees it while the interpreter finalizes), other
threads erase theirs as PyTorch does."""
import inspect
import threading

import torch


def step():
    model = torch.nn.Linear(8, 8).cuda()
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    return torch._C._is_key_in_tls("context")


held = {}
other = threading.Thread(target=lambda: held.setdefault("thread", step()))
other.start()
other.join()
held["main"] = step()
stashes = '_stash_obj_in_tls("context"' in inspect.getsource(
    torch.autograd.graph._engine_run_backward
)
print(f"stashes {stashes} main holds {held['main']} thread holds {held['thread']}")
