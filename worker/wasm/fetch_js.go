//go:build js && wasm

package wasm

import (
	"context"
	"errors"
	"syscall/js"
)

// fetchBytes GETs url with the browser's fetch (through worker.js's
// crowdtrainFetchBytes, so shards still go through Cache Storage) and copies
// the body into buf's storage in one step. It is worker.Config.Fetch; the
// request carries the X-Crowdtrain-Worker header naming workerID, so the
// coordinator counts its bytes for this worker.
func fetchBytes(ctx context.Context, url, workerID string, buf []byte) ([]byte, error) {
	type outcome struct {
		body []byte
		err  error
	}
	done := make(chan outcome, 1)
	// The callbacks run on the event loop: they copy and hand over, never block.
	onBody := js.FuncOf(func(_ js.Value, args []js.Value) any {
		arr := args[0]
		n := arr.Get("length").Int()
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		js.CopyBytesToGo(buf, arr)
		done <- outcome{body: buf}
		return nil
	})
	defer onBody.Release()
	onError := js.FuncOf(func(_ js.Value, args []js.Value) any {
		msg := "fetch failed"
		if len(args) > 0 {
			msg = args[0].Call("toString").String()
		}
		done <- outcome{err: errors.New(msg)}
		return nil
	})
	defer onError.Release()

	abort := js.Global().Get("AbortController").New()
	js.Global().Call("crowdtrainFetchBytes", url, abort.Get("signal"), workerID).Call("then", onBody, onError)
	select {
	case o := <-done:
		return o.body, o.err
	case <-ctx.Done():
		abort.Call("abort")
		<-done // the promise settles (rejected) before its callbacks are released
		return nil, ctx.Err()
	}
}
