package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/grant"
)

// What a sandbox with a grant sees: the run's channel directory, read-only
// at SandboxDir, holding the socket to the core's proxy, and the
// forwarder (mcp-forge-agent forward, in every sandbox),
// which listens on 127.0.0.1:ForwarderPort and carries each connection
// there. The proxy variables of ProxyEnv point ordinary code (urllib,
// requests, pip, uv, R's download.file and curl) at the forwarder; code
// that ignores them has no route out at all.
const (
	SandboxDir    = "/forge/net"
	SocketName    = "egress.sock"
	ForwarderPort = 3128
	// EnvHosts lists the granted "host:port"s, comma-separated, for code
	// that wants to know.
	EnvHosts = "FORGE_NETWORK"
)

// proxyURL is where the forwarder listens, as the proxy variables name it.
var proxyURL = "http://127.0.0.1:" + strconv.Itoa(ForwarderPort)

// Channels holds the live channels of runs with a grant, by token: a
// backend copies the token into its container's intent, and the core
// mounts that channel, only for the plugin it was opened for.
type Channels struct {
	proxy Server
	root  string

	live grant.Tokens[*Channel]
}

// Server serves a grant's connections from a listener until it is closed
// or ctx ends: the egress proxy (core/egress/proxy).
type Server interface {
	Serve(ctx context.Context, ln net.Listener, g *Grant) error
}

// NewChannels keeps channel directories under root (created 0711: a
// sandbox sees only its own, mounted).
func NewChannels(p Server, root string) (*Channels, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("network channels: %w", err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, fmt.Errorf("network channels: %w", err)
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries { // a previous process's: their grants are gone
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
	return &Channels{proxy: p, root: root}, nil
}

// Channel is one grant's way in from its sandbox: a directory with a unix
// socket served by the proxy for that grant. Close
// ends the grant (open connections are cut) and removes the directory.
type Channel struct {
	c      *Channels
	g      *Grant
	token  string
	plugin string
	dir    string
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}

	mounted atomic.Int32
}

// Open serves grant g to the containers plugin creates with the channel's
// token.
func (c *Channels) Open(g *Grant, plugin string) (*Channel, error) {
	ch := &Channel{c: c, g: g, token: grant.NewToken(), plugin: plugin, done: make(chan struct{})}
	ch.dir = filepath.Join(c.root, ch.token)
	if err := os.Mkdir(ch.dir, 0o755); err != nil {
		return nil, fmt.Errorf("network channel: %w", err)
	}
	p := filepath.Join(ch.dir, SocketName)
	ln, err := net.Listen("unix", p)
	if err != nil {
		os.RemoveAll(ch.dir)
		return nil, fmt.Errorf("network channel: %w", err)
	}
	// The sandbox's user is not the core's.
	err = os.Chmod(p, 0o666)
	if err == nil && g.ca != nil {
		err = os.WriteFile(filepath.Join(ch.dir, credential.BundleName), g.ca.Bundle(), 0o644)
	}
	if err != nil {
		ln.Close()
		os.RemoveAll(ch.dir)
		return nil, fmt.Errorf("network channel: %w", err)
	}
	ch.ln = ln
	ctx, cancel := context.WithCancel(context.Background())
	ch.cancel = cancel
	go func() {
		defer close(ch.done)
		_ = c.proxy.Serve(ctx, ln, g)
	}()
	c.live.Put(ch.token, plugin, ch)
	return ch, nil
}

// Lookup is the live channel token names, if it was opened for plugin.
func (c *Channels) Lookup(plugin, token string) (*Channel, error) {
	ch, ok := c.live.Lookup(plugin, token)
	if !ok {
		return nil, errors.New("the network grant is not one this server issued to this plugin, or its run has ended")
	}
	return ch, nil
}

// Close ends every live channel (the server stops).
func (c *Channels) Close() {
	for _, ch := range c.live.All() {
		ch.Close()
	}
}

// Token is the opaque id a backend copies into its container's intent.
func (ch *Channel) Token() string { return ch.token }

// Dir is the channel's directory on the host, mounted read-only at
// SandboxDir.
func (ch *Channel) Dir() string { return ch.dir }

// Grant is what the channel serves.
func (ch *Channel) Grant() *Grant { return ch.g }

// Mounted counts a container the channel was mounted into.
func (ch *Channel) Mounted() { ch.mounted.Add(1) }

// Mounts is how many containers the channel was mounted into: 0 after a
// run means its backend did not pass the grant on.
func (ch *Channel) Mounts() int { return int(ch.mounted.Load()) }

// Env returns env with the proxy variables and EnvHosts added.
func (ch *Channel) Env(env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		out[k] = proxyURL
	}
	// Nothing is reached directly: a no_proxy from the user must not send
	// code around the forwarder into no route.
	delete(out, "NO_PROXY")
	delete(out, "no_proxy")
	out[EnvHosts] = strings.Join(ch.g.Hosts(), ",")
	for _, k := range slices.Collect(maps.Keys(out)) {
		if strings.HasPrefix(k, credential.EnvPrefix) {
			delete(out, k) // only the proxy's placeholders go by these names
		}
	}
	if ch.g.ca != nil {
		for _, k := range credential.BundleEnv {
			out[k] = SandboxDir + "/" + credential.BundleName
		}
		for _, n := range ch.g.CredentialNames() {
			out[credential.EnvPrefix+strings.ToUpper(n)] = credential.Placeholder(n)
		}
	}
	return out
}

// Command wraps a container's command so that the forwarder listens
// before it runs: agent (mcp-forge-agent's path in the sandbox) starts it,
// then becomes the command, needing nothing of the image, not even a shell.
func Command(agent string, cmd []string) []string {
	return append([]string{agent, "forward", SandboxDir + "/" + SocketName, strconv.Itoa(ForwarderPort), "--"}, cmd...)
}

// Close ends the grant (connections cut), stops serving and removes the
// directory. Idempotent.
func (ch *Channel) Close() {
	if !ch.c.live.Remove(ch.token) {
		return
	}
	ch.g.Close()
	ch.cancel()
	<-ch.done
	os.RemoveAll(ch.dir)
}
