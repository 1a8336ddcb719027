package nn

import (
	"runtime"
	"testing"
)

// WorkspaceBytes is what a worker with a memory budget plans with, so it
// must be what NewWorkspace really takes from the heap: every buffer
// counted, none twice.
func TestWorkspaceBytesIsWhatTheWorkspaceAllocates(t *testing.T) {
	for _, name := range PresetNames() {
		m := mustPreset(t, name)
		for _, batch := range []int{1, 3, 16} {
			want := m.WorkspaceBytes(batch)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ws := m.NewWorkspace(batch)
			runtime.ReadMemStats(&after)
			if got := ws.Bytes(); got != want {
				t.Errorf("%s batch %d: Workspace.Bytes %d, WorkspaceBytes %d", name, batch, got, want)
			}
			// The heap also holds the slice headers, the layers' state
			// structs and the builder's map: a few KB over the buffers.
			heap := int64(after.TotalAlloc - before.TotalAlloc)
			if heap < want || heap > want+want/20+64<<10 {
				t.Errorf("%s batch %d: NewWorkspace allocated %d bytes, WorkspaceBytes says %d", name, batch, heap, want)
			}
			runtime.KeepAlive(ws)
		}
		if one, two := m.WorkspaceBytes(1), m.WorkspaceBytes(2); two <= one {
			t.Errorf("%s: a workspace for 2 examples (%d bytes) is not larger than for 1 (%d)", name, two, one)
		}
	}
}
