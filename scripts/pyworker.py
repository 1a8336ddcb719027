#!/usr/bin/env python3
"""A crowdtrain worker in Python with numpy, written from docs/PROTOCOL.md.

It joins a coordinator, takes leases one at a time, downloads their shard and
snapshot over HTTP, runs the lease's inner steps (sgd or adamw) on a model of
dense, relu, flatten, conv2d and maxpool2d layers (mnist-mlp, mnist-cnn and
fashion-cnn, for three), and sends the update the lease asks for. It shows
that the protocol document is enough to write a worker without reading the
Go code.

    python3 scripts/pyworker.py --coordinator ws://127.0.0.1:8080/ws --seconds 60 [--results N]

Needs numpy, websockets and msgpack (Debian: python3-numpy python3-websockets
python3-msgpack). Exits 0 after --seconds, or at once with a message saying
what is wrong. With --results it stops after that many accepted results.
"""

import argparse
import asyncio
import struct
import sys
import time
import urllib.parse
import urllib.request

import msgpack
import numpy as np
import websockets

PROTOCOL = 3


def frame(mtype, body):
    return msgpack.packb([PROTOCOL, mtype, body], use_bin_type=True)


def unframe(data):
    if isinstance(data, str):
        raise ValueError("the coordinator sent a text frame")
    version, mtype, body = msgpack.unpackb(data, raw=False)
    if version != PROTOCOL:
        raise ValueError(f"the coordinator speaks protocol {version}, this worker {PROTOCOL}")
    return mtype, body


class Model:
    """Dense, relu, flatten, conv2d and maxpool2d layers over one flat
    float32 parameter vector, laid out as docs/PROTOCOL.md says: per dense
    layer weight [units, in] then bias [units]; per conv2d layer weight
    [filters, C, kernel, kernel] then bias [filters]. Activations between
    layers are (N, C, H, W) for images and (N, values) once flat."""

    def __init__(self, spec, num_params):
        c, h, w = spec["input"]
        self.input_shape = (c, h, w)
        self.input_size = c * h * w
        shape = (c, h, w)  # (C, H, W) for an image, (values,) once flat
        self.layers = []  # dicts with "type" and what the layer needs
        off = 0
        for i, layer in enumerate(spec["layers"]):
            kind = layer["type"]
            if kind == "dense":
                units, n_in = layer["units"], int(np.prod(shape))
                if units < 1:
                    raise ValueError(f"layer {i}: dense units must be >= 1, got {units}")
                self.layers.append({"type": "dense", "w": (off, (units, n_in)), "b": (off + units * n_in, (units,))})
                off += units * n_in + units
                shape = (units,)
            elif kind == "conv2d":
                if len(shape) != 3:
                    raise ValueError(f"layer {i}: conv2d needs a [C, H, W] input, gets {list(shape)} (put conv2d before flatten)")
                f, k = layer.get("filters", 0), layer.get("kernel", 0)
                stride, pad = layer.get("stride", 0) or 1, layer.get("padding", 0)
                if f < 1 or k < 1 or stride < 1 or pad < 0:
                    raise ValueError(f"layer {i}: conv2d needs filters >= 1, kernel >= 1, stride >= 1 and padding >= 0, "
                                     f"got {f}, {k}, {stride}, {pad}")
                cin, hin, win = shape
                if k > hin + 2 * pad or k > win + 2 * pad:
                    raise ValueError(f"layer {i}: conv2d kernel {k} larger than the padded input {hin + 2 * pad}x{win + 2 * pad}")
                out = (f, (hin + 2 * pad - k) // stride + 1, (win + 2 * pad - k) // stride + 1)
                self.layers.append({"type": "conv2d", "w": (off, (f, cin, k, k)), "b": (off + f * cin * k * k, (f,)),
                                    "k": k, "stride": stride, "pad": pad, "out": out})
                off += f * cin * k * k + f
                shape = out
            elif kind == "maxpool2d":
                if len(shape) != 3:
                    raise ValueError(f"layer {i}: maxpool2d needs a [C, H, W] input, gets {list(shape)} (put maxpool2d before flatten)")
                k = layer.get("kernel", 0) or 2
                stride = layer.get("stride", 0) or k
                cin, hin, win = shape
                if k > hin or k > win:
                    raise ValueError(f"layer {i}: maxpool2d window {k} larger than its input {hin}x{win}")
                shape = (cin, (hin - k) // stride + 1, (win - k) // stride + 1)
                self.layers.append({"type": "maxpool2d", "k": k, "stride": stride})
            elif kind == "relu":
                self.layers.append({"type": "relu"})
            elif kind == "flatten":
                shape = (int(np.prod(shape)),)
                self.layers.append({"type": "flatten"})
            else:
                raise ValueError(f"layer type {kind!r} is not supported by this worker "
                                 "(dense, relu, flatten, conv2d and maxpool2d only)")
        if off != num_params:
            raise ValueError(f"the model has {off} parameters here, {num_params} at the coordinator")
        self.num_params = off

    @staticmethod
    def tensor(vec, where):
        off, shape = where
        return vec[off:off + int(np.prod(shape))].reshape(shape)

    def gradient(self, params, x, labels, grad):
        """Writes the gradient of the mean loss into grad; returns the summed
        loss and the number of correct predictions."""
        n = len(labels)
        acts = [x.reshape((n,) + self.input_shape)]
        saved = [None] * len(self.layers)  # what a layer's backward pass needs
        for i, layer in enumerate(self.layers):
            a, kind = acts[-1], layer["type"]
            if kind == "dense":
                acts.append(a.reshape(n, -1) @ self.tensor(params, layer["w"]).T + self.tensor(params, layer["b"]))
            elif kind == "conv2d":
                out, saved[i] = conv2d_forward(layer, a, self.tensor(params, layer["w"]), self.tensor(params, layer["b"]))
                acts.append(out)
            elif kind == "maxpool2d":
                out, saved[i] = maxpool2d_forward(layer, a)
                acts.append(out)
            elif kind == "flatten":
                acts.append(a.reshape(n, -1))
            else:
                acts.append(np.maximum(a, 0))
        z = acts[-1].astype(np.float64)
        zmax = z.max(axis=1, keepdims=True)
        e = np.exp(z - zmax)
        s = e.sum(axis=1, keepdims=True)
        rows = np.arange(n)
        loss = float((zmax[:, 0] + np.log(s[:, 0]) - z[rows, labels]).sum())
        correct = int((z.argmax(axis=1) == labels).sum())
        d = e / s
        d[rows, labels] -= 1
        d = (d / n).astype(np.float32)
        for i in range(len(self.layers) - 1, -1, -1):
            layer, kind = self.layers[i], self.layers[i]["type"]
            if kind == "relu":
                d = d * (acts[i + 1] > 0)
            elif kind == "flatten":
                d = d.reshape(acts[i].shape)
            elif kind == "maxpool2d":
                d = maxpool2d_backward(layer, saved[i], d, acts[i].shape)
            elif kind == "conv2d":
                d = conv2d_backward(layer, saved[i], d, self.tensor(params, layer["w"]),
                                    self.tensor(grad, layer["w"]), self.tensor(grad, layer["b"]), acts[i].shape, i > 0)
            else:
                self.tensor(grad, layer["w"])[:] = d.T @ acts[i].reshape(n, -1)
                self.tensor(grad, layer["b"])[:] = d.sum(axis=0)
                if i > 0:
                    d = (d @ self.tensor(params, layer["w"])).reshape(acts[i].shape)
        return loss, correct


def windows(x, k, stride):
    """The k×k windows of x (N, C, H, W) at stride: a (N, C, OH, OW, k, k) view."""
    v = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return v[:, :, ::stride, ::stride]


def conv2d_forward(layer, x, weight, bias):
    """Cross-correlation with zero padding (im2col): returns the output
    (N, F, OH, OW) and the patch matrix (N·OH·OW, C·k·k) for the backward pass."""
    k, stride, pad = layer["k"], layer["stride"], layer["pad"]
    f, oh, ow = layer["out"]
    n, c = x.shape[:2]
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    # Patch rows ordered (c, kh, kw), as the weight's [F, C, k, k] rows are.
    cols = windows(x, k, stride)[:, :, :oh, :ow].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * k * k)
    out = cols @ weight.reshape(f, -1).T + bias
    return np.ascontiguousarray(out.reshape(n, oh, ow, f).transpose(0, 3, 1, 2)), cols


def conv2d_backward(layer, cols, d, weight, gw, gb, in_shape, need_input):
    """Writes the weight and bias gradients; returns the input's gradient
    (or None when need_input is false)."""
    k, stride, pad = layer["k"], layer["stride"], layer["pad"]
    f, oh, ow = layer["out"]
    n, c, h, w = in_shape
    d2 = d.transpose(0, 2, 3, 1).reshape(n * oh * ow, f)
    gw[:] = (d2.T @ cols).reshape(gw.shape)
    gb[:] = d2.sum(axis=0)
    if not need_input:
        return None
    dcols = (d2 @ weight.reshape(f, -1)).reshape(n, oh, ow, c, k, k)
    dx = np.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=np.float32)
    for kh in range(k):  # col2im: each patch entry back to the input it was read from
        for kw in range(k):
            dx[:, :, kh:kh + stride * (oh - 1) + 1:stride, kw:kw + stride * (ow - 1) + 1:stride] += \
                dcols[:, :, :, :, kh, kw].transpose(0, 3, 1, 2)
    return dx[:, :, pad:pad + h, pad:pad + w]


def maxpool2d_forward(layer, x):
    """The max of each window; returns it and, per output, the winner's
    index within its window: the first maximum in row-major order, as the
    Go worker picks on ties."""
    k, stride = layer["k"], layer["stride"]
    n, c, h, w = x.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    win = windows(x, k, stride)[:, :, :oh, :ow].reshape(n, c, oh, ow, k * k)
    arg = win.argmax(axis=4)
    return np.take_along_axis(win, arg[..., None], axis=4)[..., 0], arg


def maxpool2d_backward(layer, arg, d, in_shape):
    k, stride = layer["k"], layer["stride"]
    _, _, oh, ow = d.shape
    dx = np.zeros(in_shape, dtype=np.float32)
    for kh in range(k):
        for kw in range(k):
            dx[:, :, kh:kh + stride * (oh - 1) + 1:stride, kw:kw + stride * (ow - 1) + 1:stride] += \
                d * (arg == kh * k + kw)
    return dx


def run_lease(model, lease, base, x, labels):
    """The inner steps of docs/PROTOCOL.md ("Computing a lease")."""
    opt = lease["inner_optimizer"]
    kind, lr = opt["type"], np.float32(opt["lr"])
    batch, steps, count = lease["batch_size"], lease["local_steps"], lease["count"]
    w = base.copy()
    g = np.zeros_like(w)
    if kind == "adamw":
        wd = np.float32(opt.get("weight_decay", 0))
        b1, b2 = np.float32(opt.get("beta1", 0)), np.float32(opt.get("beta2", 0))
        eps = np.float32(opt.get("epsilon", 0))
        if not eps > 0:
            raise ValueError("inner adamw needs epsilon > 0")
        m, v = np.zeros_like(w), np.zeros_like(w)
    elif kind != "sgd":
        raise ValueError(f"inner optimizer {kind!r} is not supported")
    clip = float(opt.get("clip_norm", 0))
    if not clip >= 0:
        raise ValueError("inner clip_norm must be >= 0")
    loss_sum, correct = 0.0, 0
    for t in range(1, steps + 1):
        lo, hi = (t - 1) * batch, min(t * batch, count)
        if lo >= hi:
            break
        loss, hits = model.gradient(w, x[lo:hi], labels[lo:hi], g)
        loss_sum += loss
        correct += hits
        if clip > 0:
            scale = clip / (float(np.sqrt(np.sum(g.astype(np.float64) ** 2))) + 1e-6)
            if scale < 1:
                g *= np.float32(scale)
        if t == 1 and lease["update_kind"] == "gradient" and kind == "sgd" and (steps == 1 or hi >= count):
            return g, loss_sum, correct  # one sgd step: the gradient itself
        if kind == "sgd":
            w -= lr * g
        else:
            c1 = np.float32(1 / (1 - float(b1) ** t))
            c2 = np.float32(1 / (1 - float(b2) ** t) ** 0.5)
            w -= lr * wd * w
            m[:] = b1 * m + (1 - b1) * g
            v[:] = b2 * v + (1 - b2) * g * g
            w -= lr * (m * c1) / (np.sqrt(v) * c2 + eps)
    update = base - w
    if lease["update_kind"] == "gradient":
        update /= lr
    elif lease["update_kind"] != "delta":
        raise ValueError(f"update kind {lease['update_kind']!r} is not supported")
    return update, loss_sum, correct


SHARD_ELEMS = {1: ("u1", True), 2: ("<f4", False), 3: ("u1", False), 4: ("<u2", False)}  # dtype, divide by 255


def parse_shard(data):
    """Decodes a format-2 shard into inputs (N, E) float32 and labels: (N,)
    for class labels, (N, t) for next-token labels."""
    if len(data) < 16:
        raise ValueError(f"shard of {len(data)} bytes is shorter than its header")
    magic, version, elem, kind, rank, classes, count = struct.unpack_from("<4sBBBBII", data, 0)
    if magic != b"CTSH" or version != 2:
        raise ValueError(f"not a format 2 shard (magic {magic!r}, version {version})")
    if elem not in SHARD_ELEMS or kind not in (1, 2) or not 1 <= rank <= 4:
        raise ValueError(f"shard with element type {elem}, label kind {kind}, rank {rank} is not supported")
    shape = struct.unpack_from(f"<{rank}I", data, 16)
    size = int(np.prod(shape))
    dtype, pixels = SHARD_ELEMS[elem]
    width = np.dtype(dtype).itemsize
    span = size + 1 if kind == 2 else size
    off = 16 + 4 * rank
    label_width = 0 if kind == 2 else (1 if classes <= 256 else 2)
    want = off + count * (span * width + label_width)
    if len(data) != want:
        raise ValueError(f"shard of {len(data)} bytes, want {want}")
    elems = np.frombuffer(data, dtype=dtype, count=count * span, offset=off).reshape(count, span)
    if kind == 2:  # a window of t+1 tokens: inputs the first t, labels the next t
        if (elems >= classes).any():
            raise ValueError(f"shard has a token at or above its vocabulary of {classes}")
        return elems[:, :size].astype(np.float32), elems[:, 1:].astype(np.int64)
    x = elems.astype(np.float32) / np.float32(255) if pixels else elems.astype(np.float32)
    labels = np.frombuffer(data, dtype="u1" if label_width == 1 else "<u2", count=count, offset=off + count * size * width)
    if (labels >= classes).any():
        raise ValueError(f"shard has a label at or above its {classes} classes")
    return x, labels.astype(np.int64)


class Worker:
    def __init__(self, url, seconds, results):
        self.url = url
        self.results = results
        u = urllib.parse.urlparse(url)
        self.origin = ("https" if u.scheme == "wss" else "http") + "://" + u.netloc
        self.deadline = time.monotonic() + seconds
        self.shards = {}
        self.snap_url, self.snap = None, None
        self.accepted = self.rejected = 0

    def get(self, ref):
        with urllib.request.urlopen(urllib.parse.urljoin(self.origin, ref), timeout=30) as resp:
            return resp.read()

    def shard(self, ref):
        if ref not in self.shards:
            if len(self.shards) >= 8:
                self.shards.pop(next(iter(self.shards)))
            self.shards[ref] = parse_shard(self.get(ref))
        return self.shards[ref]

    def snapshot(self, ref, num_params):
        if ref != self.snap_url:
            snap = np.frombuffer(self.get(ref), dtype="<f4").astype(np.float32)
            if len(snap) != num_params or not np.isfinite(snap).all():
                raise ValueError(f"snapshot {ref} has {len(snap)} values or non-finite ones, want {num_params} finite")
            self.snap_url, self.snap = ref, snap
        return self.snap

    def on_ack(self, body):
        if body["accepted"]:
            self.accepted += 1
        else:
            self.rejected += 1
            print(f"pyworker: lease {body['lease_id']} rejected: {body.get('reason')}: {body.get('detail', '')}", flush=True)

    async def recv(self, ws):
        timeout = max(0.1, self.deadline - time.monotonic())
        return unframe(await asyncio.wait_for(ws.recv(), timeout))

    async def start(self, ws, lease):
        """Sends start for a snapshot-"latest" lease and waits for started;
        returns it, or None when the coordinator refused with an ack."""
        await ws.send(frame("start", {"lease_id": lease["id"], "job_id": lease["job_id"]}))
        while True:
            mtype, body = await self.recv(ws)
            if mtype == "started" and body["lease_id"] == lease["id"]:
                return body
            if mtype == "ack":
                self.on_ack(body)
                if body["lease_id"] == lease["id"]:
                    return None
            elif mtype == "error":
                print(f"pyworker: coordinator says {body.get('code')}: {body.get('message')}", flush=True)

    async def session(self):
        async with websockets.connect(self.url, max_size=None, ping_interval=None) as ws:
            await ws.send(frame("hello", {"protocol": PROTOCOL, "kind": "native", "backend": "numpy", "threads": 1,
                                          "client": "pyworker.py", "codecs": ["f32"]}))
            mtype, body = await self.recv(ws)
            if mtype != "welcome":
                raise RuntimeError(f"expected welcome, got {mtype}: {body}")
            # A connection is bound to no job: the welcome names the first
            # one (if any fits), and an assign comes before the first lease
            # of each job the coordinator moves this worker to.
            models = {}
            job = body.get("job") or {}
            if job.get("id"):
                models[job["id"]] = Model(job["model"], job["num_params"])
                print(f"pyworker: connected as {body['worker_id']} to job {job['id']} ({job['num_params']} parameters)", flush=True)
            else:
                print(f"pyworker: connected as {body['worker_id']}; no job yet", flush=True)
            await ws.send(frame("want", {"n": 1}))
            try:
                while time.monotonic() < self.deadline and not (self.results and self.accepted >= self.results):
                    mtype, body = await self.recv(ws)
                    if mtype == "assign":
                        job = body["job"]
                        models[job["id"]] = Model(job["model"], job["num_params"])
                        print(f"pyworker: now computing for job {job['id']}", flush=True)
                    elif mtype == "revoke":
                        await ws.send(frame("want", {"n": 1}))
                    elif mtype == "lease":
                        model = models.get(body["job_id"])
                        if model is None:
                            await ws.send(frame("release", {"lease_ids": [body["id"]], "reason": "no assign for this job", "job_id": body["job_id"]}))
                            await ws.send(frame("want", {"n": 1}))
                            continue
                        await self.lease(ws, model, body)
                    elif mtype == "ack":
                        self.on_ack(body)
                    elif mtype == "idle":
                        await asyncio.sleep(body.get("retry_ms", 1000) / 1000)
                        await ws.send(frame("want", {"n": 1}))
                    elif mtype == "error":
                        print(f"pyworker: coordinator says {body.get('code')}: {body.get('message')}", flush=True)
            except asyncio.TimeoutError:
                pass  # --seconds are up
            await ws.send(frame("bye", {"reason": "pyworker done"}))

    async def lease(self, ws, model, lease):
        try:
            x_all, labels_all = await asyncio.to_thread(self.shard, lease["shard_url"])
            start, count = lease["start"], lease["count"]
            x, labels = x_all[start:start + count], labels_all[start:start + count]
            base_version, snap_url = lease["base_version"], lease["snapshot_url"]
            if lease["snapshot"] == "latest":
                started = await self.start(ws, lease)
                if started is None:
                    await ws.send(frame("want", {"n": 1}))
                    return
                base_version, snap_url = started["base_version"], started["snapshot_url"]
            base = await asyncio.to_thread(self.snapshot, snap_url, model.num_params)
            t0 = time.perf_counter()
            update, loss_sum, correct = await asyncio.to_thread(run_lease, model, lease, base, x, labels)
            ms = (time.perf_counter() - t0) * 1000
        except (ValueError, OSError) as e:
            print(f"pyworker: lease {lease['id']}: {e}; giving it back", flush=True)
            await ws.send(frame("release", {"lease_ids": [lease["id"]], "reason": str(e)[:1000], "job_id": lease["job_id"]}))
            await ws.send(frame("want", {"n": 1}))
            return
        await ws.send(frame("result", {
            "lease_id": lease["id"], "job_id": lease["job_id"], "base_version": base_version, "codec": "f32",
            "update": np.ascontiguousarray(update, dtype="<f4").tobytes(), "examples": count,
            "loss_sum": loss_sum, "correct": correct, "compute_ms": ms,
        }))
        await ws.send(frame("want", {"n": 1}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--coordinator", required=True, help="websocket URL, e.g. ws://127.0.0.1:8080/ws")
    ap.add_argument("--seconds", type=float, default=60, help="how long to work at most")
    ap.add_argument("--results", type=int, default=0, help="stop after this many accepted results (0: no limit)")
    args = ap.parse_args()
    w = Worker(args.coordinator, args.seconds, args.results)
    try:
        asyncio.run(w.session())
    except (OSError, RuntimeError, ValueError, websockets.exceptions.WebSocketException) as e:
        print(f"pyworker: {e}", file=sys.stderr)
        return 1
    print(f"pyworker: {w.accepted} results accepted, {w.rejected} rejected", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
