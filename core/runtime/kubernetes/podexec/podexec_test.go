package podexec

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// The runs below stand in for an exec through the API server: the agent's
// own code, in this process, on the exec's streams.

// serveAlpha is a file service, the agent's own, over a directory
// holding a.txt ("alpha").
func serveAlpha(t *testing.T) *Service {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	return Serve(context.Background(), func(_ context.Context, in io.Reader, out, _ io.Writer) (int, error) {
		f, err := agent.OpenFiles(dir, "")
		if err != nil {
			return 1, err
		}
		defer f.Close()
		return 0, f.Serve(in, out)
	})
}

// A file service answers each request in turn, and a closed one is dead.
func TestService(t *testing.T) {
	k := serveAlpha(t)
	for range 2 {
		res, data, err := k.Do(context.Background(), time.Minute, agent.Request{Op: agent.OpRead, Path: "a.txt", Max: 100}, nil)
		if err != nil || res.Code != agent.OK || string(data) != "alpha" {
			t.Fatalf("read: %+v %q %v", res, data, err)
		}
	}
	if k.Dead() {
		t.Fatal("a service that answers is dead")
	}
	k.Close()
	if !k.Dead() {
		t.Fatal("a closed service is not dead")
	}
	if _, _, err := k.Do(context.Background(), time.Minute, agent.Request{Op: agent.OpRead, Path: "a.txt", Max: 100}, nil); !errors.Is(err, ErrDead) {
		t.Errorf("a closed service: %v, want ErrDead (nothing sent: ask a new one)", err)
	}
}

// A request that was answered never closes its service, however late its
// watcher wakes: thousands of requests in a row on one service all go
// through (a watcher that saw Do's own cancel closed a sound service).
func TestServiceAnsweredStaysOpen(t *testing.T) {
	k := serveAlpha(t)
	defer k.Close()
	for i := range 3000 {
		if _, _, err := k.Do(context.Background(), time.Minute, agent.Request{Op: agent.OpStat, Path: "a.txt"}, nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
}

// A request cut by its bound leaves the stream out of step: the service
// is closed, and its exec ends.
func TestServiceRequestCut(t *testing.T) {
	ended := make(chan struct{})
	k := Serve(context.Background(), func(_ context.Context, in io.Reader, _, _ io.Writer) (int, error) {
		defer close(ended)
		_, err := io.Copy(io.Discard, in) // reads, never answers
		return 0, err
	})
	if _, _, err := k.Do(context.Background(), 50*time.Millisecond, agent.Request{Op: agent.OpStat, Path: "."}, nil); err == nil {
		t.Fatal("a request never answered returned no error")
	}
	if !k.Dead() {
		t.Error("the service of a cut request is not dead")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the exec of a closed service did not end")
	}
}

// The relay carries a connection the sandbox opens on a copied socket to
// the core's socket, both ways, once the pod's agent listens.
func TestRelay(t *testing.T) {
	host := filepath.Join(t.TempDir(), "core.sock")
	l, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write([]byte("re:" + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	inPod := filepath.Join(t.TempDir(), "tools.sock")
	run := func(ctx context.Context, in io.Reader, out, _ io.Writer) (int, error) {
		done := make(chan error, 1)
		go func() { done <- agent.Listen([]string{inPod}, in, out) }()
		select {
		case err := <-done:
			return 0, err
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, done := context.WithTimeout(ctx, 10*time.Second)
	defer done()
	if err := Relay(ctx, ready, []Socket{{InPod: inPod, Host: host}}, run, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", inPod)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "re:hello\n" {
		t.Fatalf("through the relay: %q, %v", line, err)
	}
}

// A relay whose agent never says it listens is an error once ready ends,
// and one whose agent fails says why.
func TestRelayNotReady(t *testing.T) {
	ready, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	silent := func(ctx context.Context, in io.Reader, _, _ io.Writer) (int, error) {
		<-ctx.Done()
		return -1, ctx.Err()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := Relay(ctx, ready, nil, silent, hclog.NewNullLogger()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a relay never ready: %v; want the deadline", err)
	}
	failing := func(_ context.Context, _ io.Reader, _, errw io.Writer) (int, error) {
		_, _ = errw.Write([]byte("listen /x: permission denied"))
		return 1, errors.New("exit 1")
	}
	if err := Relay(ctx, context.Background(), nil, failing, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a relay whose agent failed: %v; want its stderr", err)
	}
}
