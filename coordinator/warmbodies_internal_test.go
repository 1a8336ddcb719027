package coordinator

import (
	"testing"
	"testing/synctest"
)

// TestWarmBodiesHandsOutTouchedBodiesNeverTwice: after the first take a
// warmed body waits for the next; no body is ever handed out twice (a
// lease may still be downloading an earlier one); a bigger model gets a
// body of its size.
func TestWarmBodiesHandsOutTouchedBodiesNeverTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w warmBodies
		const n = 3*pageSize + 10
		first := w.take(n)
		if len(first) != 0 || cap(first) < n {
			t.Fatalf("first take: len %d cap %d, want an empty body with room for %d", len(first), cap(first), n)
		}
		first = append(first, make([]byte, n)...)
		synctest.Wait() // the next body is warm
		second := w.take(n)
		if len(second) != 0 || cap(second) < n {
			t.Fatalf("second take: len %d cap %d, want an empty body with room for %d", len(second), cap(second), n)
		}
		if second[:1][0] != 1 || second[:2*pageSize+1][2*pageSize] != 1 {
			t.Error("the second body's pages were not touched: it is not the warmed one")
		}
		if &first[0] == &second[:1][0] {
			t.Fatal("the same body was handed out twice")
		}
		synctest.Wait()
		bigger := w.take(2 * n)
		if cap(bigger) < 2*n {
			t.Fatalf("take(%d) has room for %d", 2*n, cap(bigger))
		}
		synctest.Wait()
		if next := w.take(2 * n); cap(next) < 2*n || &next[:1][0] == &bigger[:1][0] {
			t.Fatalf("after a bigger take: cap %d, same body %v", cap(next), &next[:1][0] == &bigger[:1][0])
		}
	})
}
