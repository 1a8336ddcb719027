"""PyTorch's training speed for crowdtrain's presets, for comparison with
`crowdtrain bench --backend cuda`: the same layers, batch 64, float32,
plain SGD, one optimizer step per batch. Each batch is copied from pinned
host memory, as the GPU worker stages its examples. Prints one line per
model and mode: "<model> <mode> examples/s: N" (median of 5 rounds).
"""
import statistics
import time

import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = False  # float32 GEMMs, as cuBLAS is used by crowdtrain
torch.backends.cudnn.allow_tf32 = False


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


def measure(name, make, batch=64, rounds=5, round_s=0.4):
    dev = torch.device("cuda")
    model = make().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x_host = torch.rand(batch, 1, 28, 28).pin_memory()
    y_host = torch.randint(0, 10, (batch,)).pin_memory()

    def step():
        x = x_host.to(dev)
        y = y_host.to(dev)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < round_s / 4:
        step()
        n += 1
    torch.cuda.synchronize()
    per_round = max(1, int(n * round_s / (time.perf_counter() - t0)))
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            step()
        torch.cuda.synchronize()
        rates.append(per_round * batch / (time.perf_counter() - t0))
    print(f"{name} torch eager examples/s: {statistics.median(rates):.0f}")


if __name__ == "__main__":
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    measure("mnist-mlp", mlp)
    measure("mnist-cnn", cnn)
