package podexec

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// A read-only mount of a directory of the core's (a tool grant: generated
// code and the socket its sandbox calls tools through) cannot reach a pod:
// the pod gets a copy of the directory, and every unix socket in it is
// served in the keeper, which carries each connection the sandbox opens
// over one exec to the core's own socket. Nothing in the pod can reach the
// core any other way, and what the core's end does with a connection (its
// limits, its audit) is the same as on Podman.

// Socket is a unix socket of the core's in a copied directory: where the
// keeper listens for it, and where the core's end is.
type Socket struct {
	InPod string // in the keeper's view
	Host  string
}

// relay is the core's end of a pod's `mcp-forge-agent listen`: frames
// (agent.Frame) carry the connections the sandbox opens on the copied
// sockets, at most agent.MaxRelayConns at once.
type relay struct {
	socks []Socket
	wmu   sync.Mutex
	w     io.Writer // the exec's stdin

	mu    sync.Mutex
	conns map[uint32]*relayConn
}

type relayConn struct {
	c      net.Conn
	podEOF bool // the sandbox closed its writing half
	ourEOF bool // the core's socket did
}

// Relay serves socks (copied sockets of the core's, listened on in the
// pod) over run, the exec of the agent's listen of them, until ctx ends or
// the exec does; it returns once the agent listens on all of them (or
// ready ends first). log hears why a relay ended.
func Relay(ctx, ready context.Context, socks []Socket, run Run, log hclog.Logger) error {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &relay{socks: socks, w: inW, conns: map[uint32]*relayConn{}}
	errb := &runtime.Capped{Max: 4096}
	ended := make(chan error, 1)
	go func() {
		_, err := run(ctx, inR, outW, errb)
		outW.CloseWithError(err)
		inR.Close()
		ended <- err
	}()
	br := bufio.NewReaderSize(outR, 64<<10)
	first := make(chan error, 1)
	go func() {
		f, err := agent.ReadFrame(br)
		if err == nil && f.Type != agent.FrameReady {
			err = fmt.Errorf("the relay answered %q first", f.Type)
		}
		first <- err
	}()
	select {
	case err := <-first:
		if err != nil {
			inW.Close()
			outR.Close()
			xerr := <-ended
			return fmt.Errorf("%v %v %s", err, xerr, errb.Buf.String())
		}
	case <-ready.Done():
		inW.Close()
		outR.Close()
		return ready.Err()
	}
	go func() {
		r.serve(br)
		inW.Close()
		outR.Close()
		r.closeAll()
		if err := <-ended; err != nil && ctx.Err() == nil {
			log.Debug("the socket relay of a pod ended", "error", err, "stderr", errb.Buf.String())
		}
	}()
	return nil
}

func (r *relay) send(t byte, id uint32, data []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return agent.WriteFrame(r.w, agent.Frame{Type: t, Conn: id, Data: data})
}

// serve reads the pod's frames until the exec ends.
func (r *relay) serve(br *bufio.Reader) {
	for {
		f, err := agent.ReadFrame(br)
		if err != nil {
			return
		}
		t, id, data := f.Type, f.Conn, f.Data
		switch t {
		case agent.FrameOpen:
			if len(data) != 4 || int(binary.BigEndian.Uint32(data)) >= len(r.socks) {
				return // out of step: the pod's relay is not ours
			}
			r.open(id, r.socks[binary.BigEndian.Uint32(data)].Host)
		case agent.FrameData:
			if rc := r.conn(id); rc != nil {
				_ = rc.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := rc.c.Write(data); err != nil {
					r.drop(id, true)
				}
			}
		case agent.FrameEOF:
			if rc := r.conn(id); rc != nil {
				if uc, ok := rc.c.(*net.UnixConn); ok {
					_ = uc.CloseWrite()
				}
				r.halfClosed(id, rc, true)
			}
		case agent.FrameClose:
			r.drop(id, false)
		}
	}
}

func (r *relay) conn(id uint32) *relayConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[id]
}

// open dials the core's socket for a connection the sandbox opened, and
// carries what the core's end answers back.
func (r *relay) open(id uint32, sock string) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		_ = r.send(agent.FrameClose, id, nil)
		return
	}
	rc := &relayConn{c: c}
	r.mu.Lock()
	r.conns[id] = rc
	r.mu.Unlock()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if r.send(agent.FrameData, id, buf[:n]) != nil {
					r.drop(id, false)
					return
				}
			}
			if errors.Is(err, io.EOF) {
				_ = r.send(agent.FrameEOF, id, nil)
				r.halfClosed(id, rc, false)
				return
			}
			if err != nil {
				r.drop(id, true)
				return
			}
		}
	}()
}

// halfClosed records that one side (the pod's, or the core's) closed its
// writing half: once both have, the connection is done.
func (r *relay) halfClosed(id uint32, rc *relayConn, pod bool) {
	r.mu.Lock()
	if pod {
		rc.podEOF = true
	} else {
		rc.ourEOF = true
	}
	done := rc.podEOF && rc.ourEOF
	r.mu.Unlock()
	if done {
		r.drop(id, false)
	}
}

// drop closes a connection; tell says the pod does not know yet.
func (r *relay) drop(id uint32, tell bool) {
	r.mu.Lock()
	rc := r.conns[id]
	delete(r.conns, id)
	r.mu.Unlock()
	if rc == nil {
		return
	}
	rc.c.Close()
	if tell {
		_ = r.send(agent.FrameClose, id, nil)
	}
}

func (r *relay) closeAll() {
	r.mu.Lock()
	conns := r.conns
	r.conns = map[uint32]*relayConn{}
	r.mu.Unlock()
	for _, rc := range conns {
		rc.c.Close()
	}
}
