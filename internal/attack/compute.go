package attack

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// get downloads ref (relative to the coordinator) with the bound client.
func (c *conn) get(ctx context.Context, ref string) ([]byte, error) {
	u, err := c.base.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("bad URL %q: %w", ref, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, msg)
	}
	return io.ReadAll(io.LimitReader(resp.Body, c.welcome.Limits.MaxMessageBytes+64<<20))
}

// data returns lease l's examples and labels.
func (c *conn) data(ctx context.Context, l *protocol.Lease) ([]float32, []int32, *dataset.Set, error) {
	shard := c.shards[l.ShardURL]
	if shard == nil {
		body, err := c.get(ctx, l.ShardURL)
		if err != nil {
			return nil, nil, nil, err
		}
		shard, err = dataset.DecodeShard(body, 1<<20)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("shard %s: %w", l.ShardURL, err)
		}
		if len(c.shards) >= 8 {
			clear(c.shards)
		}
		c.shards[l.ShardURL] = shard
	}
	m := c.model
	if shard.ExampleSize() != m.InputSize || shard.LabelsPerExample() != m.LabelsPerExample || l.Start+l.Count > shard.N {
		return nil, nil, nil, fmt.Errorf("lease %d does not fit its shard (%d values and %d labels per example, %d examples)",
			l.ID, shard.ExampleSize(), shard.LabelsPerExample(), shard.N)
	}
	x := make([]float32, l.Count*m.InputSize)
	labels := make([]int32, l.Count*m.LabelsPerExample)
	shard.Fill(x, labels, l.Start, l.Count)
	return x, labels, shard, nil
}

// snapshot returns the parameters at the lease's base.
func (c *conn) snapshot(ctx context.Context, ref string) ([]float32, error) {
	if ref == c.snapURL && c.snap != nil {
		return c.snap, nil
	}
	body, err := c.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if c.snap == nil {
		c.snap = make([]float32, c.model.NumParams)
	}
	if err := protocol.DecodeFloatsInto(c.snap, body); err != nil {
		c.snapURL = ""
		return nil, fmt.Errorf("snapshot %s: %w", ref, err)
	}
	c.snapURL = ref
	return c.snap, nil
}

// honest computes lease l as an honest worker would, on flipped labels
// when flip is set.
func (c *conn) honest(ctx context.Context, l *protocol.Lease, flip bool) (*protocol.Result, error) {
	x, labels, shard, err := c.data(ctx, l)
	if err != nil {
		return nil, err
	}
	if flip {
		flipLabels(labels, max(shard.Classes, 2))
	}
	params, err := c.snapshot(ctx, l.SnapshotURL)
	if err != nil {
		return nil, err
	}
	return worker.ComputeLease(c.a.backend, c.model, *l, params, x, labels)
}

// claimed is a result for l that computed nothing: chance-level loss and
// accuracy, and the update the caller fills.
func (c *conn) claimed(l *protocol.Lease, update []float32) *protocol.Result {
	classes := max(c.model.NumClasses, 2)
	labels := l.Count * c.model.LabelsPerExample
	return &protocol.Result{
		LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: update, Examples: l.Count, LossSum: float64(labels) * math.Log(float64(classes)),
		Correct: labels / classes, ComputeMs: 1,
	}
}

// forge makes the result the kind sends for l and names its variant.
func (c *conn) forge(ctx context.Context, l *protocol.Lease) (*protocol.Result, string, error) {
	a := c.a
	cfg := a.sh.cfg
	if cfg.Kind.rl() {
		return c.forgeRL(ctx, l) // rollout.go
	}
	if cfg.Fraction < 1 && a.rng.Float64() >= cfg.Fraction {
		res, err := c.honest(ctx, l, false)
		return res, "honest", err
	}
	out := make([]float32, c.model.NumParams)
	switch cfg.Kind {
	case NaN:
		for i := range out {
			out[i] = float32(math.NaN())
		}
		return c.claimed(l, out), "forged", nil
	case Sybil, Zero:
		return c.claimed(l, out), "forged", nil
	case Noise:
		if a.noiseNorm == 0 {
			res, err := c.honest(ctx, l, false)
			if err != nil {
				return nil, "", err
			}
			a.noiseNorm = norm(res.Update)
			return res, "honest", nil
		}
		noise(out, a.rng, cfg.Scale*a.noiseNorm)
		return c.claimed(l, out), "forged", nil
	case Mimic:
		if a.reference == nil || a.refUses >= mimicEvery {
			res, err := c.honest(ctx, l, false)
			if err != nil {
				return nil, "", err
			}
			a.reference, a.refShard, a.refUses = append(a.reference[:0], res.Update...), l.ShardID, 0
			return res, "honest", nil
		}
		a.refUses++
		copy(out, a.reference)
		v := "forged"
		if l.ShardID == a.refShard {
			v = "forged-same-shard"
		}
		return c.claimed(l, out), v, nil
	case Replay:
		if a.replayed && a.reference != nil {
			a.replayed = false
			copy(out, a.reference)
			return c.claimed(l, out), "replay-new-lease", nil
		}
		res, err := c.honest(ctx, l, false)
		if err != nil {
			return nil, "", err
		}
		return res, "honest", nil
	}
	res, err := c.honest(ctx, l, cfg.Kind == LabelFlip)
	if err != nil {
		return nil, "", err
	}
	h := res.Update
	switch cfg.Kind {
	case LabelFlip:
		return res, "forged", nil
	case SignFlip, Early:
		scaled(out, h, cfg.Scale)
	case Scale:
		a.sh.report.mu.Lock()
		k := a.sh.report.Scale
		a.sh.report.mu.Unlock()
		scaled(out, h, k)
	case Ratchet:
		scaled(out, h, a.ratchet)
	case ALIE:
		alie(out, a.sh.pool.add(a.id, h), cfg.Scale)
	case IPM:
		ipm(out, a.sh.pool.add(a.id, h), cfg.Scale)
	default:
		return nil, "", fmt.Errorf("kind %q has no forgery", cfg.Kind)
	}
	res.Update = out
	return res, "forged", nil
}
