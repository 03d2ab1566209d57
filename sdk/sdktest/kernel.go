package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/kernel"
)

// StartKernel runs a real kernel in a container through the Podman REST
// API (no forge core in between, and no podman CLI) and connects
// sdk/jupyter to it over ipc: the raw baseline for kernel tests and
// benchmarks. command receives the in-container path of the connection
// file. It needs FORGE_E2E=1, a Podman service ($CONTAINER_HOST or
// /run/podman/podman.sock) and the image.
func StartKernel(t testing.TB, image string, command func(connFile string) []string) *jupyter.Client {
	t.Helper()
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("needs Podman and the sandbox images: set FORGE_E2E=1 (make test does)")
	}
	dir, err := os.MkdirTemp("/var/tmp", "jk-")
	if err != nil {
		t.Fatal(err)
	}
	conn := jupyter.NewConnection("/k/k")
	b, _ := json.Marshal(conn)
	if err := os.WriteFile(filepath.Join(dir, "kernel.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	pm := newPodmanAPI()
	// Like a sandbox: no network, an init, uid 0-65535 mapped far above
	// host accounts, the directory chowned to the mapped user.
	idmap := []map[string]int{{"container_id": 0, "host_id": 2147483647, "size": 65536}}
	var created struct{ Id string }
	err = pm.do("POST", "/containers/create", map[string]any{
		"image": image, "command": command("/k/kernel.json"), "init": true,
		"netns": map[string]string{"nsmode": "none"}, "userns": map[string]string{"nsmode": "private"},
		"idmappings": map[string]any{"UIDMap": idmap, "GIDMap": idmap},
		"mounts":     []map[string]any{{"destination": "/k", "type": "bind", "source": dir, "options": []string{"rbind", "rw", "U"}}},
	}, &created)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("create kernel container: %v", err)
	}
	id := created.Id
	stop := func() {
		pm.do("DELETE", "/containers/"+id+"?force=true&t=0", nil, nil)
		os.RemoveAll(dir)
	}
	if err := pm.do("POST", "/containers/"+id+"/start", nil, nil); err != nil {
		stop()
		t.Fatalf("start kernel container: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := jupyter.Dial(ctx, conn, DirectDial(conn, filepath.Join(dir, "k")))
	if err != nil {
		var logs bytes.Buffer
		pm.do("GET", "/containers/"+id+"/logs?stdout=true&stderr=true", nil, &logs)
		stop()
		t.Fatalf("dial: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() { c.Close(); stop() })
	return c
}

// DirectDial reaches a kernel's channels at their ipc sockets on this
// machine, hostPrefix-<port>, as plugins did before the core brokered
// them (host.Sandbox.Dial): the baseline of the channel's cost in tests
// and benchmarks, never what a plugin does.
func DirectDial(conn jupyter.Connection, hostPrefix string) jupyter.DialFunc {
	ports := map[string]int{}
	for _, ch := range conn.Channels() {
		ports[ch.Name] = ch.Port
	}
	return func(ctx context.Context, channel string) (net.Conn, error) {
		port, ok := ports[channel]
		if !ok {
			return nil, fmt.Errorf("no kernel channel %q", channel)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", fmt.Sprintf("%s-%d", hostPrefix, port))
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %v", jupyter.ErrNotListening, err)
		}
		return c, err
	}
}

// IPyKernel is the command line of ipykernel in the forge Python image (the
// one the jupyter plugin runs).
func IPyKernel(conn string) []string { return kernel.IPyKernelCommand(conn) }

// IRKernel is the command line of IRkernel in the forge R image (the one the
// irkernel plugin runs).
func IRKernel(conn string) []string { return kernel.IRKernelCommand(conn) }

type podmanAPI struct {
	c    *http.Client
	base string
}

func newPodmanAPI() *podmanAPI {
	sock := "/run/podman/podman.sock"
	if h := os.Getenv("CONTAINER_HOST"); strings.HasPrefix(h, "unix://") {
		sock = strings.TrimPrefix(h, "unix://")
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}
	return &podmanAPI{c: &http.Client{Transport: tr, Timeout: 90 * time.Second}, base: "http://podman/v4.0.0/libpod"}
}

// do calls the API; out is a JSON target, an io.Writer for raw bodies, or nil.
func (p *podmanAPI) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u, err := url.Parse(p.base + path)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(method, u.String(), body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.c.Do(req)
	if err != nil {
		return fmt.Errorf("podman API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("podman API %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	switch o := out.(type) {
	case nil:
		return nil
	case io.Writer:
		_, err = io.Copy(o, resp.Body)
		return err
	default:
		return json.NewDecoder(resp.Body).Decode(out)
	}
}
