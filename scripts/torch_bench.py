"""PyTorch's training speed for crowdtrain's presets, for comparison with
`crowdtrain bench --backend cuda`: the same layers, batch 64 (charlm: 32
sequences of 128 bytes), float32, plain SGD, one optimizer step per batch. Each batch is copied from pinned
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


class Block(nn.Module):
    """charlm's pre-LayerNorm block: causal self-attention, then a GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        y = self.ln1(x)
        x = x + self.att(y, y, y, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharLM(nn.Module):
    """The charlm preset: context 128, width 128, 4 blocks of 4 heads, bytes."""

    def __init__(self, t=128, d=128, blocks=4, heads=4):
        super().__init__()
        self.tok = nn.Embedding(256, d)
        self.pos = nn.Embedding(t, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(blocks)])
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, 256)
        self.register_buffer("mask", torch.triu(torch.full((t, t), float("-inf")), 1))
        self.register_buffer("positions", torch.arange(t))

    def forward(self, x):
        h = self.tok(x) + self.pos(self.positions)
        for b in self.blocks:
            h = b(h, self.mask)
        return self.out(self.ln(h)).reshape(-1, 256)  # a row per position


def images(batch):
    return torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))


def text(batch, t=128):
    return torch.randint(0, 256, (batch, t)), torch.randint(0, 256, (batch * t,))


def measure(name, make, batch=64, rounds=5, round_s=0.4, data=images):
    dev = torch.device("cuda")
    model = make().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x_host, y_host = data(batch)
    x_host, y_host = x_host.pin_memory(), y_host.pin_memory()

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
    measure("charlm", CharLM, batch=32, data=text)
