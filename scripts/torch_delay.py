#!/usr/bin/env python3
"""What one step of staleness does to charlm, in plain PyTorch, and what
the initialisation does to it (docs/TRAINING.md, "A second worker on the
transformer").

usage: /usr/bin/python3 scripts/torch_delay.py [--delay D] [--gain G]
       [--init torch|ours|gpt2|ours-emb1|torch-emb002] [--batch 32]
       [--steps 300] [--every 50] [--tiny] [--text FILE]
       [--threads 1] [--marks 60,120,300]

The model is the charlm preset (scripts/torch_charlm_step.py's), or
charlm-tiny with --tiny, trained with the charlm job's optimizer (AdamW
3e-3, weight decay 0.01, clip_norm 1) on one thread, on windows of the
King James text at multiples of the context, shuffled (FILE: the text,
`bible -f Gen1:1-Rev22:21`; the last 5% held out). Step t applies the
gradient taken at the weights of step t-D, as an asynchronous grid whose
results land D versions after their base; with --gain G that base is
predicted G*D steps ahead along the last step (the coordinator's weight
prediction). Prints bits per character on 64 held-out windows every
--every steps, or with --marks at those seconds of training (the
evaluations' time left out), stopping at the last.

--init: torch is PyTorch's defaults (nn.Embedding N(0,1), nn.Linear
U(+-1/sqrt(fan_in))), which crowdtrain's Init now follows for sequence
models; ours is its Init before (embeddings U with standard deviation
0.02, dense layers He-uniform); gpt2 is N(0,0.02) everywhere with the
residual projections scaled by 1/sqrt(2*blocks); ours-emb1 and
torch-emb002 swap the embeddings' scale between the two.
"""
import argparse, collections, math, os, sys, time

# Debian's PyTorch runs its GEMMs in OpenBLAS, whose own threads
# torch.set_num_threads does not bound (on a 2-core machine "one thread"
# was two): --threads goes to the BLAS too, set before torch loads it.
def _blas_threads(argv):
    n = "1"
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            n = argv[i + 1]
        elif arg.startswith("--threads="):
            n = arg.split("=", 1)[1]
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = n


_blas_threads(sys.argv)

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument('--delay', type=int, default=0)
p.add_argument('--gain', type=float, default=0.0)
p.add_argument('--lr', type=float, default=3e-3)
p.add_argument('--beta1', type=float, default=0.9)
p.add_argument('--dc', type=float, default=0.0, help='delay compensation (DC-ASGD-a): g + dc*g*g/sqrt(v)*(w_now - w_base)')
p.add_argument('--init', default='torch', choices=['torch', 'ours', 'gpt2', 'ours-emb1', 'torch-emb002'])
p.add_argument('--batch', type=int, default=32)
p.add_argument('--steps', type=int, default=300)
p.add_argument('--every', type=int, default=50)
p.add_argument('--seed', type=int, default=1)
p.add_argument('--tiny', action='store_true')
p.add_argument('--text', default='/tmp/kjv.txt')
p.add_argument('--threads', type=int, default=1)
p.add_argument('--marks', default='', help='seconds of training to evaluate at, e.g. 60,120,300')
a = p.parse_args()
torch.set_num_threads(a.threads)
seconds = [float(m) for m in a.marks.split(',') if m]
torch.manual_seed(a.seed)
D, HEADS, LAYERS, CTX, VOCAB = (32, 2, 2, 32, 256) if a.tiny else (128, 4, 4, 128, 256)
text = torch.frombuffer(bytearray(open(a.text, 'rb').read()), dtype=torch.uint8).long()
cut = int(len(text) * 0.95)
train, val = text[:cut], text[cut:]
nwin = (len(train) - 1) // CTX
offsets = [(len(val) - CTX - 1) * i // 63 for i in range(64)]
vx = torch.stack([val[o:o + CTX] for o in offsets])
vy = torch.stack([val[o + 1:o + CTX + 1] for o in offsets])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mask):
        h = self.n1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.n2(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.position = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB)
        self.register_buffer('mask', torch.triu(torch.full((CTX, CTX), float('-inf')), 1))

    def forward(self, x):
        h = self.embed(x) + self.position(torch.arange(x.shape[1]))
        for b in self.blocks:
            h = b(h, self.mask)
        return self.head(self.norm(h))


@torch.no_grad()
def initialise(m):
    small = math.sqrt(3) * 0.02
    for mod in m.modules():
        if isinstance(mod, nn.Embedding):
            if a.init in ('ours', 'torch-emb002'):
                mod.weight.uniform_(-small, small)
            elif a.init == 'gpt2':
                mod.weight.normal_(0, 0.02)
        elif isinstance(mod, nn.Linear):  # out_proj too
            if a.init in ('ours', 'ours-emb1'):
                b = math.sqrt(6 / mod.in_features)
                mod.weight.uniform_(-b, b)
                mod.bias.zero_()
            elif a.init == 'gpt2':
                mod.weight.normal_(0, 0.02)
                mod.bias.zero_()
    if a.init == 'gpt2':
        for b in m.blocks:
            b.attn.in_proj_weight.normal_(0, 0.02)
            b.attn.out_proj.weight.normal_(0, 0.02 / math.sqrt(2 * LAYERS))
            b.ff[2].weight.normal_(0, 0.02 / math.sqrt(2 * LAYERS))


model, worker = Transformer(), Transformer()
initialise(model)
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, 0.999), weight_decay=0.01)
params, wparams = list(model.parameters()), list(worker.parameters())
flat = lambda ps: torch.cat([q.detach().reshape(-1) for q in ps])
history = collections.deque([flat(params)], maxlen=a.delay + 2)
order = torch.randperm(nwin, generator=torch.Generator().manual_seed(a.seed)).tolist()


@torch.no_grad()
def bits():
    return F.cross_entropy(model(vx).reshape(-1, VOCAB), vy.reshape(-1)).item() / math.log(2)


marks, t0, trained = [], time.time(), 0.0
step = 0
while (seconds and len(marks) < len(seconds)) or (not seconds and step < a.steps):
    step += 1
    t1 = time.time()
    i = max(0, len(history) - 1 - a.delay)  # the weights of `delay` steps ago
    base = history[i].clone()
    if a.gain > 0 and i > 0:
        base += a.gain * a.delay * (history[i] - history[i - 1])
    torch.nn.utils.vector_to_parameters(base, wparams)
    start = (step * a.batch) % (nwin - a.batch)
    batch = order[start:start + a.batch]
    x = torch.stack([train[o * CTX:o * CTX + CTX] for o in batch])
    y = torch.stack([train[o * CTX + 1:o * CTX + CTX + 1] for o in batch])
    worker.zero_grad()
    F.cross_entropy(worker(x).reshape(-1, VOCAB), y.reshape(-1)).backward()
    for q, w in zip(params, wparams):
        q.grad = w.grad.clone()
    if a.dc > 0 and a.delay > 0:
        # Delay compensation: a first-order correction of the stale
        # gradient towards the current weights, the Hessian approximated
        # by g*g scaled by Adam's second moment (DC-ASGD-a).
        drift = flat(params) - base
        off = 0
        for q in params:
            n = q.numel()
            st = opt.state.get(q)
            if st and 'exp_avg_sq' in st:
                v = st['exp_avg_sq'].reshape(-1)
                g = q.grad.reshape(-1)
                g += a.dc * g * g / (v.sqrt() + 1e-8) * drift[off:off + n]
            off += n
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    history.append(flat(params))
    trained += time.time() - t1
    if seconds and trained >= seconds[len(marks)]:
        marks.append(f'{seconds[len(marks)]:.0f}s(step {step}):{bits():.3f}')
    elif not seconds and step % a.every == 0:
        marks.append(f'{step}:{bits():.3f}')
print(f"{'charlm-tiny' if a.tiny else 'charlm'} init={a.init} delay={a.delay} gain={a.gain} batch={a.batch} "
      f"lr={a.lr} beta1={a.beta1} dc={a.dc} threads={a.threads} ({time.time() - t0:.0f} s): " + ' '.join(marks), flush=True)
