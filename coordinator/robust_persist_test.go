package coordinator_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/store"
)

// The asynchronous robust clip's state (centre and radius window) is in
// the checkpoint: a resumed job clips with the radius it had, instead of
// warming up again, when whoever answers first could set the scale.
func TestClipStateSurvivesRestart(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := quietJob(t)
	g := newStoredGrid(t, db, &spec)
	rc := g.joinRaw()
	n := rc.welcome.Job.NumParams
	for i := range 6 {
		l := rc.leases(1)[0]
		u := make(protocol.Floats, n)
		for k := range u {
			u[k] = float32(1+i%3) * 1e-4
		}
		u[0] += float32(i) * 1e-6 // distinct: a repeat would be refused as a replay
		rc.send(&protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32, Update: u, Examples: l.Count, LossSum: 1})
		if a := rc.ack(l.ID); !a.Accepted {
			t.Fatalf("result %d: %+v", i, a)
		}
	}
	before := g.jobView()
	rc.conn.CloseNow()
	g.close()
	if !(before.ClipRadius > 0) {
		t.Fatalf("clip radius %v before the restart: the warm-up did not end", before.ClipRadius)
	}
	c, err := db.LatestCheckpoint(context.Background(), before.ID)
	if err != nil || c.Version != before.Version {
		t.Fatalf("latest checkpoint v%d (%v), want v%d", c.Version, err, before.Version)
	}
	g2 := newStoredGrid(t, db, nil)
	after := g2.jobView()
	if after.ClipRadius != before.ClipRadius {
		t.Fatalf("clip radius %v after the restart, %v before: the clip's state was not kept", after.ClipRadius, before.ClipRadius)
	}
}
