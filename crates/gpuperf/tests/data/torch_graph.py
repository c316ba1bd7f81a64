"""A CUDA graph captured with torch.cuda.graph and replayed three times on the
simulated runtime, then a model made into graphs by
torch.cuda.make_graphed_callables and trained two steps (its forward and
backward graphs replayed). The lines marked `# call:NAME` are the ones the tests
expect in the stacks."""

import threading
import time

import torch


def body(x, w):
    return torch.relu(x @ w) * 2.0  # call:captured


def capture(x, w):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body(x, w)  # warm-up on a side stream, as PyTorch documents
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = body(x, w)  # call:capture
    return g, out


def replay(g):
    g.replay()  # call:replay


def graphed_step(graphed, x):
    graphed(x).sum().backward()  # call:graphed_step


def graphed_training():
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).cuda()
    x = torch.randn(16, 32, device="cuda")
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    for _ in range(2):
        graphed_step(graphed, x)


def settle_autograd():
    # PyTorch's exit race (pytorch/pytorch#38228): autograd's CUDA worker drops
    # its last backward task after that backward returned, and the task's
    # thread-local state holds a Python object; if the interpreter is already
    # finalizing then, taking the GIL ends the worker with pthread_exit through
    # a noexcept destructor: "terminate called without an active exception".
    # One more backward, from a new thread, runs on that worker only after it
    # dropped the last one; then the GIL is left free for a while, so that the
    # worker can drop this one too (it waits for the GIL to do so).
    def tiny_backward():
        (torch.ones(1, device="cuda", requires_grad=True) * 2).sum().backward()

    t = threading.Thread(target=tiny_backward)
    t.start()
    t.join()
    time.sleep(0.5)


def main():
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    g, out = capture(x, w)
    for _ in range(3):
        replay(g)
    graphed_training()
    torch.cuda.synchronize()
    print("replayed 3 times", tuple(out.shape), "and trained 2 graphed steps")
    settle_autograd()


if __name__ == "__main__":
    main()
