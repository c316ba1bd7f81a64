"""Two simulated devices, a peer copy between them, a DataLoader pinning
batches on its own thread, and PyTorch's expandable segments (the test sets
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the virtual memory API."""

import torch
from torch.utils.data import DataLoader, TensorDataset


def on_two_devices():
    a = torch.randn(256, 256, device="cuda:0")
    b = a.to("cuda:1")  # a peer copy
    return (b @ b).sum()


def load():
    ds = TensorDataset(torch.randn(64, 32))
    for (batch,) in DataLoader(ds, batch_size=16, pin_memory=True):
        assert batch.is_pinned()
        batch.to("cuda:0", non_blocking=True).mul_(2.0)


def main():
    on_two_devices()
    load()
    torch.cuda.synchronize("cuda:0")
    torch.cuda.synchronize("cuda:1")
    segments = torch.cuda.memory._snapshot()["segments"]
    expandable = bool(segments) and all(s.get("is_expandable") for s in segments)
    print("devices", torch.cuda.device_count(), "expandable segments", expandable)


if __name__ == "__main__":
    main()
