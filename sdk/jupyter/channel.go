package jupyter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// The kernel's five channels: each is a socket the kernel binds in its
// container, and an endpoint of that name the plugin dials through the core.
const (
	ChannelShell   = "shell"
	ChannelIOPub   = "iopub"
	ChannelStdin   = "stdin"
	ChannelControl = "control"
	ChannelHB      = "hb"
)

// DialFunc opens a byte stream to one channel of a kernel (host.Sandbox's
// Dial to the endpoint of that name). An error wrapping ErrNotListening is
// retried until Dial's context ends; any other ends Dial.
type DialFunc func(ctx context.Context, channel string) (net.Conn, error)

// ErrNotListening is what a DialFunc wraps while the kernel has not bound
// the channel's socket yet.
var ErrNotListening = errors.New("the kernel does not listen on the channel yet")

// Channel is one of a kernel's sockets.
type Channel struct {
	Name string
	Port int
}

// Channels are the connection's five channels.
func (c Connection) Channels() []Channel {
	return []Channel{{ChannelShell, c.ShellPort}, {ChannelIOPub, c.IOPubPort}, {ChannelStdin, c.StdinPort}, {ChannelControl, c.ControlPort}, {ChannelHB, c.HBPort}}
}

// SocketPath is the ipc socket the kernel binds for port in its container.
func (c Connection) SocketPath(port int) string { return fmt.Sprintf("%s-%d", c.IP, port) }

// ZeroMQ runs over the channels through a zmq4 transport of our own: its
// endpoints are transportName://<client>/<channel>, and its Dial calls that
// client's DialFunc. ZMTP itself (greeting, framing) is zmq4's, over the
// stream the DialFunc returns.
const transportName = "forge-channel"

var (
	registerOnce sync.Once
	registerErr  error
	dialers      sync.Map // client key → DialFunc
	nextKey      atomic.Int64
)

type channelTransport struct{}

func (channelTransport) Dial(ctx context.Context, _ transport.Dialer, addr string) (net.Conn, error) {
	key, channel, _ := strings.Cut(addr, "/")
	f, ok := dialers.Load(key)
	if !ok {
		return nil, fmt.Errorf("jupyter: channel %s of a closed client", channel)
	}
	return f.(DialFunc)(ctx, channel)
}

func (channelTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("jupyter: the forge-channel transport only dials")
}

func (channelTransport) Addr(ep string) (string, error) { return ep, nil }

// registerDial makes dial reachable as the endpoints of one client; the
// returned function forgets it.
func registerDial(dial DialFunc) (prefix string, forget func(), err error) {
	registerOnce.Do(func() { registerErr = zmq4.RegisterTransport(transportName, channelTransport{}) })
	if registerErr != nil {
		return "", nil, registerErr
	}
	key := fmt.Sprint(nextKey.Add(1))
	dialers.Store(key, dial)
	return transportName + "://" + key + "/", func() { dialers.Delete(key) }, nil
}
