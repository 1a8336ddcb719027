#!/usr/bin/env python3
"""The same model in plain PyTorch, from a model crowdtrain exported.

`crowdtrain export` (and the admin page's downloads) write safetensors whose
"__metadata__" carries the model spec as JSON ("crowdtrain.model") and the
job spec ("crowdtrain.spec"). This script rebuilds that architecture with
torch.nn modules whose state_dict names are exactly the exported tensor
names (`<index>.<type>.<tensor>`, `<index>.residual.<j>.<type>.<tensor>` in a
residual body), loads the weights strictly, and then:

  score  --model M --x X.npy --y Y.npy
         prints `loss L`: the mean softmax cross-entropy (nats) per label
         position on that batch, and `accuracy A`. X holds the inputs as
         float32, shape [n, *input] (token ids as exact integers for a text
         model); Y the integer labels, [n] for a classifier, [n, t] for a
         sequence model. With --grad G.npy it also writes the gradient of
         that mean loss (dropout off) as float64: every parameter tensor
         flattened, in the order of their exported names sorted, a tied
         embedding once with both of its uses summed.
  sample --model M --prompt TEXT [--tokens N] [--temperature T] [--seed S]
         prints the prompt's continuation from a byte-level text model, fed
         as crowdtrain's Generate feeds it (the last <= t bytes, left-aligned).
  grpo   --model M --batch B.json [--grad G.npy]
         prints `loss L`, `kl K` and `clip_fraction C` of the GRPO loss
         of a batch of completion groups, as crowdtrain's rl.Loss defines
         it: B is {"groups": [[{"prompt": [ids], "tokens": [ids],
         "old_logprobs": [..], "ref_logprobs": [..] (optional), "reward":
         r}, ...], ...], "clip", "kl_coef", "eps", "temperature"}; each
         completion is one example (prompt then tokens, left-aligned, zeros
         after), advantages (r - mean)/(std + eps) per group with the
         population std, the clipped surrogate and the k3 KL estimate per
         token, averaged over every completion token. With --grad it writes
         the loss's gradient as score does.
  train  --model M --data FILE [--tokens N] [--batch B] [--threads K]
         trains the same architecture from the exported (initial) weights
         single-process on the text file, with the job's outer optimizer
         (adam, adamw with weight_decay, sgd, momentum; clip_norm) and batch
         size, for N training tokens, and prints `val_loss L`: the mean loss
         on the validation split (the last val_fraction of the file, windows
         of t+1 bytes at multiples of t, at most 64 of them evenly spread),
         as crowdtrain's coordinator measures it. --threads K gives it K
         cores: OpenBLAS K threads, torch's own K or 1, whichever passes
         faster (measured first). With --marks S1,S2,...
         it trains until the last mark instead, in seconds of training
         (the evaluations' own time left out), and prints `mark S step N
         val_loss L bits_per_char B` at each; --marks 0 scores the model
         as it is.
  grpo-train --model M --problems P.json --steps N [--eval-every K] [--seed S]
         runs GRPO single-process from the exported policy M,
         as an RL job's rules define it: P is {"train": [[prompt ids,
         answer], ...], "eval": [[prompt ids, answer], ...], "group_size",
         "groups_per_step", "max_new_tokens", "temperature", "clip",
         "stop": [ids], "optimizer": {the outer optimizer}}. Each training
         prompt in turn gets group_size completions sampled at temperature
         (ending after a stop token, kept; within the context), rewarded 1
         when the text before the first newline is the answer; a group of
         equal rewards teaches nothing and is dropped, as the coordinator
         drops it; every groups_per_step groups make one step of the
         optimizer on their GRPO loss (grpo above, the logged
         log-probabilities as old). Prompts are sampled groups_per_step
         at a time; groups left over wait for the next step, one step
         old (on-policy otherwise). Every K steps and at step 0 it prints
         `step S rollouts R used U solved X`: R completions sampled, U of
         them in steps, X the share of the eval prompts answered exactly
         right by greedy decoding.

Only the standard library, numpy and torch (Debian's python3-torch) are
used; the safetensors file is parsed here (8-byte header length, JSON
header, little-endian F32 data).
"""

import argparse
import copy
import json
import math
import os
import struct
import sys
import time

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

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as F


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name} is {t['dtype']}, want F32")
        b, e = t["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
    return tensors, meta


# ---- the architecture ----

class Embedding(tnn.Module):
    """Token ids [n, t] -> weight[x] + position[p], [n, t, units]."""

    def __init__(self, vocab, units, positions):
        super().__init__()
        self.weight = tnn.Parameter(torch.zeros(vocab, units))
        self.position = tnn.Parameter(torch.zeros(positions, units)) if positions else None

    def forward(self, x):
        out = F.embedding(x.long(), self.weight)
        if self.position is not None:
            out = out + self.position[: x.shape[1]]
        return out


class Dense(tnn.Module):
    """nn.Linear; on an image or flat input it flattens first, on a
    sequence [t, d] it applies per position."""

    def __init__(self, fan_in, units, flatten):
        super().__init__()
        self.weight = tnn.Parameter(torch.zeros(units, fan_in))
        self.bias = tnn.Parameter(torch.zeros(units))
        self.flatten = flatten

    def forward(self, x):
        if self.flatten:
            x = x.flatten(1)
        return F.linear(x, self.weight, self.bias)


class TiedDense(tnn.Module):
    """The output layer that shares the first embedding's weight: only its
    own bias is a tensor of its own."""

    def __init__(self, vocab, embedding):
        super().__init__()
        self.bias = tnn.Parameter(torch.zeros(vocab))
        self._embedding = [embedding]  # not a submodule: no second copy in the state_dict

    def forward(self, x):
        return F.linear(x, self._embedding[0].weight, self.bias)


class Attention(tnn.MultiheadAttention):
    """torch.nn.MultiheadAttention(d, heads, batch_first=True) as
    self-attention, causal if asked; its tensors are in_proj_weight,
    in_proj_bias, out_proj.weight and out_proj.bias."""

    def __init__(self, d, heads, causal):
        super().__init__(d, heads, batch_first=True)
        self.causal = causal

    def forward(self, x):
        mask = None
        if self.causal:
            t = x.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]


class Flatten(tnn.Module):
    def forward(self, x):
        return x.flatten(1)


class Layers(tnn.Module):
    """Layer i is the child str(i), a ModuleDict {type: module}, so its
    state_dict names are `<i>.<type>.<tensor>`: the exported names."""

    def __init__(self, entries):
        super().__init__()
        for i, (typ, mod) in enumerate(entries):
            self.add_module(str(i), tnn.ModuleDict({typ: mod}))
        self.order = [(str(i), typ) for i, (typ, _) in enumerate(entries)]

    def forward(self, x):
        for i, typ in self.order:
            x = getattr(self, i)[typ](x)
        return x


class Residual(Layers):
    """x + body(x); the body's layers are `<j>.<type>` under it."""

    def forward(self, x):
        return x + super().forward(x)


def build(spec_layers, shape, ctx):
    """Returns (Layers, output shape) for layers applied to an example of
    shape: ("tokens", t), ("seq", t, d), ("image", c, h, w) or ("flat", n)."""
    entries = []
    for i, ls in enumerate(spec_layers):
        typ = ls["type"]
        where = f"layer {i} ({typ})"
        if typ == "dense":
            if ls.get("tied"):
                if shape[0] != "seq" or ctx["embedding"] is None:
                    raise SystemExit(f"{where}: tied needs a sequence input and an embedding before it")
                emb = ctx["embedding"]
                mod = TiedDense(emb.weight.shape[0], emb)
                shape = ("seq", shape[1], emb.weight.shape[0])
            elif shape[0] == "seq":
                mod = Dense(shape[2], ls["units"], flatten=False)
                shape = ("seq", shape[1], ls["units"])
            else:
                fan_in = int(np.prod(shape[1:]))
                mod = Dense(fan_in, ls["units"], flatten=True)
                shape = ("flat", ls["units"])
        elif typ == "relu":
            mod = tnn.ReLU()
        elif typ == "gelu":
            mod = tnn.GELU()
        elif typ == "flatten":
            mod = Flatten()
            shape = ("flat", int(np.prod(shape[1:])))
        elif typ == "conv2d":
            c, h, w = shape[1:]
            k, s, p = ls["kernel"], ls.get("stride") or 1, ls.get("padding") or 0
            mod = tnn.Conv2d(c, ls["filters"], k, stride=s, padding=p)
            shape = ("image", ls["filters"], (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
        elif typ == "maxpool2d":
            c, h, w = shape[1:]
            k = ls.get("kernel") or 2
            s = ls.get("stride") or k
            mod = tnn.MaxPool2d(k, stride=s)
            shape = ("image", c, (h - k) // s + 1, (w - k) // s + 1)
        elif typ == "embedding":
            mod = Embedding(ls["vocab"], ls["units"], ls.get("positions") or 0)
            if ctx["embedding"] is None:
                ctx["embedding"] = mod
            shape = ("seq", shape[1], ls["units"])
        elif typ == "layernorm":
            mod = tnn.LayerNorm(shape[-1], eps=ls.get("eps") or 1e-5)
        elif typ == "attention":
            mod = Attention(shape[2], ls["heads"], bool(ls.get("causal")))
        elif typ == "dropout":
            mod = tnn.Dropout(ls.get("rate") or 0.0)
        elif typ == "residual":
            body, out = build(ls["layers"], shape, ctx)
            if out != shape:
                raise SystemExit(f"{where}: the body changes the shape {shape} to {out}")
            mod = Residual([(typ, getattr(body, i)[typ]) for i, typ in body.order])
        else:
            raise SystemExit(f"{where}: unknown layer type {typ!r}")
        entries.append((typ, mod))
    return Layers(entries), shape


class Model(tnn.Module):
    def __init__(self, spec):
        super().__init__()
        inp = spec["input"]
        if len(inp) == 1:
            shape = ("tokens", inp[0])
        else:
            shape = ("image",) + tuple(inp)
        self.input = inp
        self.seq = len(inp) == 1
        self.net, self.out_shape = build(spec["layers"], shape, {"embedding": None})

    def forward(self, x):
        """x: [n, *input] float; returns logits [n, labels per example, classes]."""
        x = x.reshape([x.shape[0]] + list(self.input))
        if self.seq:
            x = x.long()
        out = self.net(x)
        if out.dim() == 2:
            out = out.unsqueeze(1)
        return out

    def load_exported(self, tensors):
        sd = {"net." + k: v for k, v in tensors.items()}
        try:
            self.load_state_dict(sd, strict=True)
        except RuntimeError as e:
            raise SystemExit(f"the exported tensors do not fit the model spec: {e}")


def load(path, dtype=torch.float64):
    tensors, meta = read_safetensors(path)
    if "crowdtrain.model" not in meta:
        raise SystemExit(f"{path}: no crowdtrain.model in its metadata: not a crowdtrain export")
    spec = json.loads(meta["crowdtrain.model"])
    model = Model(spec)
    model.load_exported(tensors)
    return model.to(dtype), meta


def mean_loss(model, x, y, dtype=torch.float64):
    logits = model(x.to(dtype))
    n, per, classes = logits.shape
    y = y.reshape(n, per).long()
    loss = F.cross_entropy(logits.reshape(n * per, classes), y.reshape(-1), reduction="mean")
    acc = (logits.argmax(-1) == y).double().mean()
    return loss, acc


# ---- commands ----

def cmd_score(a):
    torch.set_num_threads(a.threads)
    model, _ = load(a.model)
    model.eval()
    x = torch.from_numpy(np.load(a.x).astype(np.float64))
    y = torch.from_numpy(np.load(a.y).astype(np.int64))
    if a.grad:
        loss, acc = mean_loss(model, x, y)
        loss.backward()
        grads = {n[len("net."):]: p.grad for n, p in model.named_parameters()}
        np.save(a.grad, torch.cat([grads[n].reshape(-1) for n in sorted(grads)]).numpy())
    else:
        with torch.no_grad():
            loss, acc = mean_loss(model, x, y)
    print(f"loss {loss.item():.9f}")
    print(f"accuracy {acc.item():.9f}")


def generate(model, prompt, tokens, temperature, gen):
    t = model.input[0]
    ctx = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(tokens):
            window = ctx[-t:]
            k = len(window)
            x = torch.zeros(1, t, dtype=torch.float64)
            x[0, :k] = torch.tensor(window, dtype=torch.float64)
            logits = model(x)[0, k - 1]
            if temperature == 0:
                nxt = int(logits.argmax())
            else:
                p = torch.softmax(logits / temperature, -1)
                nxt = int(torch.multinomial(p, 1, generator=gen))
            out.append(nxt)
            ctx.append(nxt)
    return out


def cmd_sample(a):
    torch.set_num_threads(a.threads)
    model, _ = load(a.model)
    model.eval()
    if not model.seq:
        raise SystemExit("sample: the model does not read token sequences")
    gen = torch.Generator().manual_seed(a.seed)
    out = generate(model, a.prompt.encode("utf-8"), a.tokens, a.temperature, gen)
    # The model writes bytes, not necessarily UTF-8: they go out as they are.
    sys.stdout.buffer.write(bytes(out) + b"\n")


def grpo_loss(model, batch):
    """The GRPO loss of batch (see the docstring's grpo), its mean k3
    and its clipped share, in the model's dtype."""
    clip = batch.get("clip", 0.2)
    kl_coef = batch.get("kl_coef", 0.0)
    eps = batch.get("eps", 1e-4)
    temperature = batch.get("temperature", 1.0)
    t = model.input[0]
    xs, picks, olds, refs, advs = [], [], [], [], []
    has_ref = True
    for group in batch["groups"]:
        r = torch.tensor([c["reward"] for c in group], dtype=torch.float64)
        adv = (r - r.mean()) / (r.std(unbiased=False) + eps)
        for c, a in zip(group, adv):
            seq = list(c["prompt"]) + list(c["tokens"])
            x = torch.zeros(t, dtype=torch.float64)
            x[:len(seq)] = torch.tensor(seq, dtype=torch.float64)
            e, p0 = len(xs), len(c["prompt"])
            xs.append(x)
            for j, tok in enumerate(c["tokens"]):
                picks.append((e, p0 + j - 1, tok))
                advs.append(a)
            olds += c["old_logprobs"]
            if c.get("ref_logprobs") is None:
                has_ref = False
            else:
                refs += c["ref_logprobs"]
    logits = model(torch.stack(xs)) / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    idx = torch.tensor(picks)
    logp = logp_all[idx[:, 0], idx[:, 1], idx[:, 2]]
    adv = torch.stack(advs)
    ratio = torch.exp(logp - torch.tensor(olds, dtype=torch.float64))
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros(())
    if has_ref and refs:
        d = torch.tensor(refs, dtype=torch.float64) - logp
        k3 = torch.exp(d) - d - 1
        per_token = per_token + kl_coef * k3
        kl = k3.mean()
    elif kl_coef > 0:
        raise SystemExit("grpo: kl_coef > 0 needs ref_logprobs for every completion")
    return per_token.mean(), kl, (unclipped > clipped).double().mean()


def cmd_grpo(a):
    torch.set_num_threads(a.threads)
    model, _ = load(a.model)
    model.eval()
    with open(a.batch) as f:
        batch = json.load(f)
    loss, kl, clip_fraction = grpo_loss(model, batch)
    if a.grad:
        loss.backward()
        grads = {n[len("net."):]: p.grad for n, p in model.named_parameters()}
        np.save(a.grad, torch.cat([grads[n].reshape(-1) for n in sorted(grads)]).numpy())
    print(f"loss {loss.item():.12f}")
    print(f"kl {kl.item():.12f}")
    print(f"clip_fraction {clip_fraction.item():.12f}")


def sample_batch(model, prompts, n, max_new, temperature, stop, gen):
    """n completions of each prompt, sampled together in one batch: their
    tokens (each ending after a stop token, kept, or at max_new within the
    context) and log-probabilities (at temperature; greedy when it is 0),
    the n of prompt 0 first."""
    t = model.input[0]
    seqs = [list(p) for p in prompts for _ in range(n)]
    room = [min(max_new, t - len(q)) for q in seqs]
    toks = [[] for _ in seqs]
    lps = [[] for _ in seqs]
    done = [r < 1 for r in room]
    with torch.no_grad():
        while True:
            live = [i for i in range(len(seqs)) if not done[i]]
            if not live:
                break
            x = torch.zeros(len(live), t)
            for r, i in enumerate(live):
                x[r, :len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.float32)
            logits = model(x)
            rows = torch.stack([logits[r, len(seqs[i]) - 1] for r, i in enumerate(live)])
            if temperature == 0:
                picks = rows.argmax(-1)
                logp = torch.zeros(len(live))
            else:
                logps = F.log_softmax(rows / temperature, -1)
                picks = torch.multinomial(logps.exp(), 1, generator=gen)[:, 0]
                logp = logps.gather(1, picks[:, None])[:, 0]
            for r, i in enumerate(live):
                nxt = int(picks[r])
                seqs[i].append(nxt)
                toks[i].append(nxt)
                lps[i].append(min(float(logp[r]), 0.0))
                if nxt in stop or len(toks[i]) >= room[i]:
                    done[i] = True
    return toks, lps


def solved_share(model, problems, max_new, stop):
    right = 0
    for k in range(0, len(problems), 256):
        chunk = problems[k:k + 256]
        toks, _ = sample_batch(model, [p for p, _ in chunk], 1, max_new, 0, stop, None)
        right += sum(reward_of(tk, answer) for tk, (_, answer) in zip(toks, chunk))
    return right / len(problems)


def reward_of(tokens, answer):
    text = bytes(tokens).decode("utf-8", "replace").split("\n", 1)[0]
    return 1.0 if text == answer else 0.0


def cmd_grpo_train(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, _ = load(a.model, dtype=torch.float32)
    model.eval()  # dropout off: the ratios compare the policy with what the sampler saw
    if not model.seq:
        raise SystemExit("grpo-train: the policy must read token sequences")
    with open(a.problems) as f:
        cfg = json.load(f)
    group, per_step = cfg["group_size"], cfg["groups_per_step"]
    max_new, temp, stop = cfg["max_new_tokens"], cfg["temperature"], set(cfg["stop"])
    o = cfg["optimizer"]
    opt = make_optimizer(model.parameters(), o)
    clip_norm = o.get("clip_norm") or 0.0
    gen = torch.Generator().manual_seed(a.seed)
    train, evals = cfg["train"], cfg["eval"]
    sampled = used = 0
    pending = []
    start = time.time()
    print(f"step 0 rollouts 0 used 0 solved {solved_share(model, evals, max_new, stop):.4f}", flush=True)
    i = 0
    for step in range(1, a.steps + 1):
        while len(pending) < per_step:
            # per_step prompts at a time, in the stream's order; a flat
            # group is dropped, and the groups past per_step wait for the
            # next step (one step old then, as a buffered group of the
            # job's can be).
            batch = [train[(i + k) % len(train)] for k in range(per_step)]
            i += per_step
            toks, lps = sample_batch(model, [p for p, _ in batch], group, max_new, temp, stop, gen)
            sampled += group * per_step
            for k, (prompt, answer) in enumerate(batch):
                tk, lp = toks[k * group:(k + 1) * group], lps[k * group:(k + 1) * group]
                rewards = [reward_of(x, answer) for x in tk]
                if min(rewards) == max(rewards):
                    continue
                pending.append([{"prompt": prompt, "tokens": x, "old_logprobs": l, "reward": r}
                                for x, l, r in zip(tk, lp, rewards)])
        groups, pending = pending[:per_step], pending[per_step:]
        used += per_step * group
        loss, _, _ = grpo_loss(model, {"groups": groups, "clip": cfg["clip"], "temperature": temp})
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        opt.step()
        if step % a.eval_every == 0 or step == a.steps:
            x = solved_share(model, evals, max_new, stop)
            print(f"step {step} rollouts {sampled} used {used} solved {x:.4f} seconds {time.time() - start:.1f}", flush=True)


def make_optimizer(params, o):
    typ, lr = o.get("type", "adam"), o["lr"]
    betas = (o.get("beta1") or 0.9, o.get("beta2") or 0.999)
    eps = o.get("epsilon") or 1e-8
    if typ == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=o.get("weight_decay", 0.0))
    if typ == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    if typ == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=o.get("momentum") or 0.9, nesterov=bool(o.get("nesterov")))
    if typ == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise SystemExit(f"train: optimizer type {typ!r} is not one this script knows")


def text_windows(data, t, start, end):
    """Windows of t+1 bytes of data[start:end] at multiples of t."""
    n = (end - start - 1) // t
    idx = start + np.arange(n)[:, None] * t + np.arange(t + 1)[None, :]
    return data[idx]


def pick_intra_op_threads(model, train, batch, t, n):
    """Gives the process's n cores to whichever split trains faster: with
    OpenBLAS on n threads (set before torch loads), torch's own intra-op
    threads at n or at 1. On a 2-core VM the two pools at 2 each fought
    (charlm: 42 examples/s, against 92 with torch at 1 and the BLAS at 2,
    66 the other way round), so it is measured here, on forward and
    backward passes of a training batch (the optimizer untouched), and
    said on stderr."""
    if n <= 1:
        return
    w = torch.from_numpy(train[:batch].astype(np.int64))

    def rate(k):
        torch.set_num_threads(k)
        model.zero_grad(set_to_none=True)
        start, passes = time.time(), 0
        while passes < 2 or time.time() - start < 1.5:
            logits = model(w[:, :t].float())
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).backward()
            passes += 1
        return passes / (time.time() - start)

    rate(n)  # warm-up
    rates = {k: rate(k) for k in (n, 1)}
    model.zero_grad(set_to_none=True)
    best = max(rates, key=rates.get)
    torch.set_num_threads(best)
    print(f"intra-op threads {best} (passes/s: {', '.join(f'{k}: {r:.2f}' for k, r in rates.items())}; BLAS threads {n})", file=sys.stderr)


def cmd_train(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, meta = load(a.model, dtype=torch.float32)
    if not model.seq:
        raise SystemExit("train: only text models (input [t]) train here")
    spec = json.loads(meta.get("crowdtrain.spec", "{}"))
    opt_spec = spec.get("outer_optimizer") or {"type": "adamw", "lr": 3e-3, "weight_decay": 0.01, "clip_norm": 1.0}
    batch = a.batch or spec.get("batch_size") or 32
    clip = opt_spec.get("clip_norm") or 0.0
    t = model.input[0]
    with open(a.data, "rb") as f:
        data = np.frombuffer(f.read(), dtype=np.uint8)
    vf = a.val_fraction
    if vf is None:
        ds = spec.get("dataset")
        vf = (ds.get("val_fraction") if isinstance(ds, dict) else None) or 0.05
    split = len(data) - int(len(data) * vf)
    train = text_windows(data, t, 0, split)
    val = text_windows(data, t, split, len(data))
    # The coordinator scores at most val_windows of them, evenly spread.
    m = min(a.val_windows, len(val))
    val = val[[k * len(val) // m for k in range(m)]] if m else val
    if len(train) == 0 or len(val) == 0:
        raise SystemExit(f"train: {a.data} is too short for windows of {t + 1} bytes in both splits")
    opt = make_optimizer(model.parameters(), opt_spec)
    rng = np.random.default_rng(a.seed)
    pick_intra_op_threads(model, train, batch, t, a.threads)
    steps = max(1, a.tokens // (batch * t))
    marks = [float(x) for x in a.marks.split(",")] if a.marks else []
    if marks and (sorted(marks) != marks or marks[0] < 0):
        raise SystemExit(f"train: --marks {a.marks}: want seconds in increasing order, from 0")
    order = rng.permutation(len(train))
    pos = 0
    start = time.time()
    trained = 0.0  # seconds of training, evaluations left out

    def val_loss(m):
        m.eval()
        with torch.no_grad():
            v = torch.from_numpy(val.astype(np.int64))
            vl, _ = mean_loss(m, v[:, :t], v[:, 1:])
        return vl.item()

    def score_marks(step):
        while marks and trained >= marks[0]:
            vl = val_loss(copy.deepcopy(model).double())
            print(f"mark {marks.pop(0):g} step {step} val_loss {vl:.6f} bits_per_char {vl / math.log(2):.6f}", flush=True)
        model.train()

    if marks:
        score_marks(0)
        steps = 1 << 62  # until the last mark
    model.train()
    for step in range(steps):
        if a.marks and not marks:
            return
        t1 = time.time()
        if pos + batch > len(order):
            order, pos = rng.permutation(len(train)), 0
        w = torch.from_numpy(train[order[pos:pos + batch]].astype(np.int64))
        pos += batch
        logits = model(w[:, :t].float())
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if a.verbose and (step % 50 == 0 or step == steps - 1):
            print(f"step {step + 1}/{steps} loss {loss.item():.4f}", file=sys.stderr)
        if a.marks:
            trained += time.time() - t1
            score_marks(step + 1)
    if a.marks:
        return
    model.eval()
    with torch.no_grad():
        v = torch.from_numpy(val.astype(np.int64))
        vl, _ = mean_loss(model.double(), v[:, :t], v[:, 1:])
    secs = time.time() - start
    print(f"steps {steps} batch {batch} tokens {steps * batch * t} seconds {secs:.1f} tokens_per_sec {steps * batch * t / secs:.0f}")
    print(f"val_loss {vl.item():.6f}")
    print(f"bits_per_char {vl.item() / math.log(2):.6f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="mean loss of the exported model on a batch")
    s.add_argument("--model", required=True)
    s.add_argument("--x", required=True)
    s.add_argument("--y", required=True)
    s.add_argument("--grad", help="also write the loss's gradient to this .npy (float64, tensors in sorted name order)")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(f=cmd_score)
    s = sub.add_parser("sample", help="text from a byte-level text model")
    s.add_argument("--model", required=True)
    s.add_argument("--prompt", required=True)
    s.add_argument("--tokens", type=int, default=200)
    s.add_argument("--temperature", type=float, default=0.8)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(f=cmd_sample)
    s = sub.add_parser("grpo", help="the GRPO loss (and gradient) of a batch of completion groups")
    s.add_argument("--model", required=True)
    s.add_argument("--batch", required=True, help="the batch as JSON (see above)")
    s.add_argument("--grad", help="also write the loss's gradient to this .npy (float64, tensors in sorted name order)")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(f=cmd_grpo)
    s = sub.add_parser("grpo-train", help="GRPO single-process from an exported policy")
    s.add_argument("--model", required=True, help="the exported policy (version 0)")
    s.add_argument("--problems", required=True, help="the prompts, answers and RL settings as JSON (see above)")
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--eval-every", type=int, default=40)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--seed", type=int, default=1)
    s.set_defaults(f=cmd_grpo_train)
    s = sub.add_parser("train", help="train the same architecture single-process on a text file")
    s.add_argument("--model", required=True, help="the exported initial model (version 0)")
    s.add_argument("--data", required=True, help="the text file")
    s.add_argument("--tokens", type=int, default=2_000_000, help="training tokens (examples x context)")
    s.add_argument("--batch", type=int, default=0, help="default: the job's batch_size")
    s.add_argument("--val-fraction", type=float, default=None, help="default: the job's dataset.val_fraction, or 0.05")
    s.add_argument("--val-windows", type=int, default=64)
    s.add_argument("--marks", default="", help="seconds of training to score at, e.g. 60,120,300 (in place of --tokens); 0 scores the model as it is")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("-v", "--verbose", action="store_true")
    s.set_defaults(f=cmd_train)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
