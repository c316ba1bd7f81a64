"""A CUDA graph captured with torch.cuda.graph and replayed three times on the
simulated runtime. The lines marked `# call:NAME` are the ones the tests expect
in the stacks."""

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


def main():
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    g, out = capture(x, w)
    for _ in range(3):
        replay(g)
    torch.cuda.synchronize()
    print("replayed 3 times", tuple(out.shape))


if __name__ == "__main__":
    main()
