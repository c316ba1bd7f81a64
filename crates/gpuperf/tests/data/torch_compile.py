"""torch.compile on the simulated runtime: Inductor generates Triton kernels,
Triton compiles them (its own ptxas) and launches them through the simulated
driver. The lines marked `# call:NAME` are the ones the tests expect in the
stacks."""

import torch


def f(x, y):
    return torch.nn.functional.gelu(x * y + 1.0).sum(dim=-1)  # call:compiled_body


compiled = torch.compile(f)


def run_compiled(x, y):
    return compiled(x, y)  # call:run_compiled


def main():
    x = torch.randn(64, 256, device="cuda")
    y = torch.randn(64, 256, device="cuda")
    for _ in range(3):
        run_compiled(x, y)
    torch.cuda.synchronize()
    print("compiled ran 3 times")


if __name__ == "__main__":
    main()
