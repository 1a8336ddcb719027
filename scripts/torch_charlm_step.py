#!/usr/bin/env python3
"""One training step of the charlm transformer in PyTorch on the CPU, timed
beside `crowdtrain bench --model charlm` (docs/BENCHMARKS.md).

usage: /usr/bin/python3 scripts/torch_charlm_step.py [THREADS] [--batch 32] [--opt sgd|adamw]

The model is the charlm preset written in plain PyTorch: byte embeddings
(256 x 128) plus learned positions (128), four pre-LayerNorm blocks of
causal 4-head self-attention (nn.MultiheadAttention) and a 512-unit GELU
MLP, each with a residual connection, a final LayerNorm and a 256-way
linear output: 875,520 parameters. A step is forward, the cross-entropy
over all 128 positions, backward and an optimizer step (SGD by default,
as our bench), on one fixed batch of random bytes. Prints the median of 5
rounds of about 2 s after a warm-up, as examples/s (sequences of 128
tokens) and tokens/s.
"""
import argparse, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument('threads', nargs='?', type=int, default=1)
p.add_argument('--batch', type=int, default=32)
p.add_argument('--opt', choices=['sgd', 'adamw'], default='sgd')
p.add_argument('--rounds', type=int, default=5)
p.add_argument('--round', type=float, default=2.0, help='seconds per round')
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
D, HEADS, LAYERS, CTX, VOCAB = 128, 4, 4, 128, 256


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.norm2 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class CharLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(CTX, D)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer('mask', torch.triu(torch.full((CTX, CTX), float('-inf')), 1))

    def forward(self, x):
        t = x.shape[1]
        h = self.embed(x) + self.position(torch.arange(t))
        for layer in self.layers:
            h = layer(h, self.mask[:t, :t])
        return self.head(self.norm(h))


model = CharLM()
params = sum(q.numel() for q in model.parameters())
if a.opt == 'sgd':
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
x = torch.randint(0, VOCAB, (a.batch, CTX))
y = torch.randint(0, VOCAB, (a.batch, CTX))


def step():
    opt.zero_grad(set_to_none=False)
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    opt.step()


t0 = time.perf_counter()
n = 0
while n < 3 or time.perf_counter() - t0 < 1.0:
    step()
    n += 1
per_round = max(1, int(n * a.round / (time.perf_counter() - t0)))
rates = []
for _ in range(a.rounds):
    t0 = time.perf_counter()
    for _ in range(per_round):
        step()
    rates.append(a.batch * per_round / (time.perf_counter() - t0))
blas = sorted({l.split()[-1].rsplit('/', 1)[-1] for l in open('/proc/self/maps') if 'blas' in l})
print(f"torch {torch.__version__} charlm params={params} batch={a.batch} threads={a.threads} opt={a.opt} blas={blas}")
print('rounds: ' + ' '.join(f'{r:.1f}' for r in rates))
med = statistics.median(rates)
print(f'examples/s: {med:.1f}')
print(f'tokens/s: {med * CTX:.0f}')
