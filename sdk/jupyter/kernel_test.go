package jupyter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

func TestRealIPyKernel(t *testing.T) {
	c := sdktest.StartKernel(t, "mcp-forge/python:3.11", sdktest.IPyKernel)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	r, ev, err := c.Run(ctx, "x = 41\nprint('hi')\nx + 1", jupyter.ExecuteOptions{StoreHistory: true})
	if err != nil || r.Status != "ok" {
		t.Fatalf("execute: %+v %v", r, err)
	}
	var stdout, result string
	for _, e := range ev {
		switch e.Kind {
		case "stream":
			stdout += e.Text
		case "execute_result":
			result, _ = e.Data["text/plain"].(string)
		}
	}
	if stdout != "hi\n" || result != "42" {
		t.Fatalf("stdout %q result %q (%+v)", stdout, result, ev)
	}

	r, _, err = c.Run(ctx, "1/0", jupyter.ExecuteOptions{})
	if err != nil || r.Status != "error" || r.EName != "ZeroDivisionError" {
		t.Fatalf("error reply: %+v %v", r, err)
	}

	// Interrupt a long execution: state survives.
	x, err := c.Execute("import time\nprint('started', flush=True)\ntime.sleep(30)", jupyter.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Interrupt only once the code runs, not while the request is queued.
	for started := false; !started; {
		select {
		case ev := <-x.Events:
			started = ev.Kind == "stream" && strings.Contains(ev.Text, "started")
		case <-ctx.Done():
			t.Fatal("the execution never started")
		}
	}
	start := time.Now()
	if err := c.Interrupt(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = x.Wait(ctx)
	x.Close()
	if err != nil || r.Status != "error" || r.EName != "KeyboardInterrupt" {
		t.Fatalf("interrupted reply: %+v %v", r, err)
	}
	t.Logf("interrupt took %s", time.Since(start))
	_, ev, _ = c.Run(ctx, "x", jupyter.ExecuteOptions{})
	if len(ev) == 0 || ev[len(ev)-1].Data["text/plain"] != "41" {
		t.Fatalf("state lost after interrupt: %+v", ev)
	}
	if !c.Alive(ctx) {
		t.Fatal("heartbeat")
	}
	if n := c.BadSignatures.Load(); n != 0 {
		t.Fatalf("%d bad signatures from a real kernel", n)
	}
}

// BenchmarkRoundTrip is the raw kernel round trip of `y = 1`, the baseline
// the session benchmark is compared with.
func BenchmarkRoundTrip(b *testing.B) {
	c := sdktest.StartKernel(b, "mcp-forge/python:3.11", sdktest.IPyKernel)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, _, err := c.Run(ctx, "y = 1", jupyter.ExecuteOptions{}); err != nil || r.Status != "ok" {
			b.Fatal(err)
		}
	}
}
