"""An eager PyTorch training step for gpuperf's tests on the simulated runtime.

An MLP, an MSE loss and AdamW, two steps. With `--profile OUT`, the same steps
run under torch.profiler (CPU and CUDA activities, with_stack=True) and the trace
is exported to OUT, for the cross-check against `gpuperf record`. The lines
marked `# call:NAME` are the ones the tests expect in the stacks.
"""

import sys
import threading
import time

import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)
    ).cuda()


def forward(model, x):
    return model(x)  # call:forward


def loss_of(y, target):
    return torch.nn.functional.mse_loss(y, target)  # call:loss


def train_step(model, opt, x, target):
    opt.zero_grad(set_to_none=True)
    loss = loss_of(forward(model, x), target)  # call:train_forward
    loss.backward()  # call:backward
    opt.step()  # call:step
    return loss


def run():
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device="cuda")
    target = torch.randn(32, 16, device="cuda")
    for _ in range(2):
        train_step(model, opt, x, target)
    torch.cuda.synchronize()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--profile":
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=acts, with_stack=True) as p:
            run()
            settle_autograd()
        p.export_chrome_trace(sys.argv[2])
    else:
        run()
        settle_autograd()
    print("torch", torch.__version__, "kernels ran on", torch.cuda.get_device_name(0))


def settle_autograd():
    # PyTorch's exit race (pytorch/pytorch#38228), as in torch_graph.py: one
    # more backward from a new thread runs on autograd's CUDA worker only after
    # it dropped the last task, then the GIL is left free for the worker to
    # drop that one too, before the interpreter finalizes. Inside the profiled
    # region, so that both runs of the cross-check see its kernels.
    def tiny_backward():
        (torch.ones(1, device="cuda", requires_grad=True) * 2).sum().backward()

    t = threading.Thread(target=tiny_backward)
    t.start()
    t.join()
    time.sleep(0.5)


if __name__ == "__main__":
    main()
