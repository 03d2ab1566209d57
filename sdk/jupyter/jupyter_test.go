package jupyter

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSignAndVerify(t *testing.T) {
	s := signer{key: []byte("k")}
	frames, err := s.encode(Message{Identities: [][]byte{[]byte("id")}, Header: newHeader("sess", "execute_request"), Content: json.RawMessage(`{"code":"1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.decode(frames)
	if err != nil || m.Header.MsgType != "execute_request" || string(m.Identities[0]) != "id" || string(m.Content) != `{"code":"1"}` {
		t.Fatalf("round trip: %+v %v", m, err)
	}
	frames[len(frames)-1] = []byte(`{"code":"2"}`)
	if _, err := s.decode(frames); err != ErrBadSignature {
		t.Fatalf("tampered content: %v", err)
	}
	if _, err := (signer{key: []byte("other")}).decode(frames[:len(frames)-1]); err == nil {
		t.Fatal("short message accepted")
	}
}

func TestConnectionEndpoints(t *testing.T) {
	c := NewConnection("/forge/k/k")
	if len(c.Key) != 64 || c.SignatureScheme != "hmac-sha256" || c.Transport != "ipc" {
		t.Fatalf("%+v", c)
	}
	if got := c.Endpoint("/var/lib/x/k", c.ShellPort); got != "ipc:///var/lib/x/k-1" {
		t.Fatal(got)
	}
}

// startKernel runs a real ipykernel in the forge Python image over ipc in
// dir, the way the jupyter plugin does (minus the core's policy).
func startKernel(t testing.TB) (*Client, func()) {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("needs Podman and the Python image: set FORGE_E2E=1 (make test does)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "jk-")
	if err != nil {
		t.Fatal(err)
	}
	conn := NewConnection("/k/k")
	b, _ := json.Marshal(conn)
	os.WriteFile(filepath.Join(dir, "kernel.json"), b, 0o644)
	out, err := exec.Command("podman", "run", "-d", "--rm", "--init", "--network", "none", "--userns=auto",
		"-v", dir+":/k:U", "mcp-forge/python:3.11", "python3", "-m", "ipykernel_launcher", "-f", "/k/kernel.json").CombinedOutput()
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	stop := func() {
		exec.Command("podman", "rm", "-f", "-t", "0", id).Run()
		os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, conn, filepath.Join(dir, "k"))
	if err != nil {
		logs, _ := exec.Command("podman", "logs", id).CombinedOutput()
		stop()
		t.Fatalf("dial: %v\n%s", err, logs)
	}
	return c, func() { c.Close(); stop() }
}

func TestRealIPyKernel(t *testing.T) {
	c, stop := startKernel(t)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	r, ev, err := c.Run(ctx, "x = 41\nprint('hi')\nx + 1", ExecuteOptions{StoreHistory: true})
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

	r, ev, err = c.Run(ctx, "1/0", ExecuteOptions{})
	if err != nil || r.Status != "error" || r.EName != "ZeroDivisionError" {
		t.Fatalf("error reply: %+v %v", r, err)
	}

	// Interrupt a long execution: state survives.
	x, err := c.Execute("import time\ntime.sleep(30)", ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
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
	_, ev, _ = c.Run(ctx, "x", ExecuteOptions{})
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
	c, stop := startKernel(b)
	defer stop()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, _, err := c.Run(ctx, "y = 1", ExecuteOptions{}); err != nil || r.Status != "ok" {
			b.Fatal(err)
		}
	}
}
