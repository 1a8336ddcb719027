#!/usr/bin/env python3
"""One training step of a transformer preset in PyTorch on the CPU, timed
beside `crowdtrain bench --model charlm|gpt-small|gpt-mini`
(docs/BENCHMARKS.md).

usage: /usr/bin/python3 scripts/torch_charlm_step.py [THREADS] [--model charlm]
       [--batch 32] [--opt sgd|adamw]

The model is the preset (nn.Transformer in Go) written in plain PyTorch:
token embeddings plus learned positions, pre-LayerNorm blocks of causal
self-attention (nn.MultiheadAttention) and a 4x GELU MLP, each with a
residual connection, a final LayerNorm and a linear output over the
vocabulary, tied to the token embedding where the preset ties it (its
bias is not tied). charlm: 256 bytes, width 128, context 128, 4 blocks of
4 heads, 875,520 parameters; gpt-small: 4,096 tokens, width 384, context
256, 6 blocks of 6 heads, tied, 12,322,816; gpt-mini: 1,024 tokens, width
64, context 64, 2 blocks of 2 heads, 236,288. A step is forward, the
cross-entropy over every position, backward and an optimizer step (SGD by
default, as our bench), on one fixed batch of random tokens. Prints the
median of 5 rounds of about 2 s after a warm-up, as examples/s
(sequences of the context's length) and tokens/s.
"""
import argparse, os, statistics, time

p = argparse.ArgumentParser()
p.add_argument('threads', nargs='?', type=int, default=1)
p.add_argument('--model', choices=['charlm', 'gpt-small', 'gpt-mini'], default='charlm')
p.add_argument('--batch', type=int, default=32)
p.add_argument('--opt', choices=['sgd', 'adamw'], default='sgd')
p.add_argument('--rounds', type=int, default=5)
p.add_argument('--round', type=float, default=2.0, help='seconds per round')
a = p.parse_args()
# Debian's PyTorch runs its GEMMs in OpenBLAS, whose own threads
# torch.set_num_threads does not bound: on a 2-core machine "one thread"
# was two. The BLAS gets the same count, set before torch loads it.
for var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ[var] = str(a.threads)

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(a.threads)
torch.manual_seed(0)
D, HEADS, LAYERS, CTX, VOCAB, TIED = {
    'charlm': (128, 4, 4, 128, 256, False),
    'gpt-small': (384, 6, 6, 256, 4096, True),
    'gpt-mini': (64, 2, 2, 64, 1024, False),
}[a.model]


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


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.position = nn.Embedding(CTX, D)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        if TIED:
            self.head.weight = self.embed.weight
        self.register_buffer('mask', torch.triu(torch.full((CTX, CTX), float('-inf')), 1))

    def forward(self, x):
        t = x.shape[1]
        h = self.embed(x) + self.position(torch.arange(t))
        for layer in self.layers:
            h = layer(h, self.mask[:t, :t])
        return self.head(self.norm(h))


model = Transformer()
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
print(f"torch {torch.__version__} {a.model} params={params} batch={a.batch} threads={a.threads} opt={a.opt} blas={blas}")
print('rounds: ' + ' '.join(f'{r:.1f}' for r in rates))
med = statistics.median(rates)
print(f'examples/s: {med:.1f}')
print(f'tokens/s: {med * CTX:.0f}')
