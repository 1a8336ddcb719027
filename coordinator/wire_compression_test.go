package coordinator

import "testing"

// An fp32 job whose workers fetch fp16 snapshots: its updates are not
// compressed (a little under 1: a frame's other fields), its snapshots
// are (2x), and the split survives a checkpoint.
func TestCompressionOfUpdatesAndSnapshotsApart(t *testing.T) {
	const params = 1000
	var j Job
	for range 10 {
		j.wire.result(4*params+40, params) // an fp32 result frame
		j.wire.snapshot(2*params, params)  // an fp16 snapshot
	}
	var v JobView
	j.wireView(&v)
	if v.UpdateCompression <= 0.98 || v.UpdateCompression > 1 {
		t.Errorf("update_compression %g for fp32 results, want just under 1", v.UpdateCompression)
	}
	if v.SnapshotCompression != 2 {
		t.Errorf("snapshot_compression %g for fp16 snapshots, want 2", v.SnapshotCompression)
	}
	if v.Compression <= v.UpdateCompression || v.Compression >= v.SnapshotCompression {
		t.Errorf("compression %g, want between the updates' %g and the snapshots' %g", v.Compression, v.UpdateCompression, v.SnapshotCompression)
	}

	var restored Job
	restored.wire.restore(j.wire.progress())
	var r JobView
	restored.wireView(&r)
	if r.Compression != v.Compression || r.UpdateCompression != v.UpdateCompression || r.SnapshotCompression != v.SnapshotCompression {
		t.Errorf("after a checkpoint: compression %g / %g / %g, want %g / %g / %g",
			r.Compression, r.UpdateCompression, r.SnapshotCompression, v.Compression, v.UpdateCompression, v.SnapshotCompression)
	}

	var fresh JobView
	new(Job).wireView(&fresh)
	if fresh.Compression != 0 || fresh.UpdateCompression != 0 || fresh.SnapshotCompression != 0 {
		t.Errorf("a job with nothing on the wire shows compression %+v, want 0 (none yet)", fresh)
	}
}
