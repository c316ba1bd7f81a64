"""A size computed from device data that asks for more than the device has:
on the simulation it must fail as torch.OutOfMemoryError, taking no host memory.
Prints the error and the peak resident memory."""

import resource

import torch

n = torch.tensor([1 << 36], device="cuda")  # 2**36 floats: 256 GiB
try:
    torch.empty(int(n.item()), device="cuda")
    print("allocated")
except torch.OutOfMemoryError as e:
    size = str(e).split("Tried to allocate ")[1].split(".", 1)[0]
    print(f"OutOfMemoryError: asked for {size}.00 GiB")
print("peak RSS MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
