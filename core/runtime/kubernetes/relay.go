package kubernetes

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path"
	"path/filepath"
	"sync"
	"time"

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

// copyDir is copy n's place in the seed and the keeper (from 1).
func copyDir(n int) string { return fmt.Sprintf("/forge/copy/%d", n) }

// copyVolume is copy n's emptyDir.
func copyVolume(n int) string { return fmt.Sprintf("copy-%d", n) }

// copySize bounds a copy: generated code (toolbridge.MaxGenerated) and
// room to spare.
const copySize = 64 << 20

// hostSocket is a unix socket of the core's in a copied directory: where
// the keeper listens for it, and where the core's end is.
type hostSocket struct {
	InPod string // in the keeper's view
	Host  string
}

// socketsOf finds the sockets in the copied mounts' directories.
func socketsOf(mounts []mountPlace) ([]hostSocket, error) {
	var out []hostSocket
	for _, m := range mounts {
		if m.Copy == 0 || m.Source == "" {
			continue
		}
		err := filepath.WalkDir(m.Source, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSocket == 0 {
				return nil
			}
			rel, err := filepath.Rel(m.Source, p)
			if err != nil {
				return err
			}
			out = append(out, hostSocket{InPod: path.Join(copyDir(m.Copy), filepath.ToSlash(rel)), Host: p})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("copy of %s: %w", m.Source, err)
		}
	}
	return out, nil
}

// relay is the core's end of a pod's `mcp-forge-agent listen`: frames
// (agent.Frame) carry the connections the sandbox opens on the copied
// sockets, at most agent.MaxRelayConns at once.
type relay struct {
	socks []hostSocket
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

// startRelay serves pod id's copied sockets until ctx ends or the pod
// goes; it returns once the keeper listens on all of them.
func (c *Client) startRelay(ctx context.Context, ready context.Context, id string, socks []hostSocket) error {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &relay{socks: socks, w: inW, conns: map[uint32]*relayConn{}}
	args := agentCmd("listen")
	for _, s := range socks {
		args = append(args, s.InPod)
	}
	errb := &runtime.Capped{Max: 4096}
	ended := make(chan error, 1)
	go func() {
		_, err := c.exec(ctx, id, stream{Container: containerKeeper, Command: args, Stdin: inR, Stdout: outW, Stderr: errb})
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
			return fmt.Errorf("relay the sockets of pod %s: %v %v %s", id, err, xerr, errb.Buf.String())
		}
	case <-ready.Done():
		inW.Close()
		outR.Close()
		return fmt.Errorf("relay the sockets of pod %s: %w", id, ready.Err())
	}
	go func() {
		r.serve(br)
		inW.Close()
		outR.Close()
		r.closeAll()
		if err := <-ended; err != nil && ctx.Err() == nil {
			c.log.Debug("the socket relay of a pod ended", "pod", id, "error", err, "stderr", errb.Buf.String())
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

// SyncMount implements runtime.RemoteWorkspace: the copy at target is
// brought up to date with its directory (a tool grant given more tools).
// Files are replaced, not rewritten in place, as tar unpacks them: a
// sandbox reading one sees the old or the new file.
func (c *Client) SyncMount(ctx context.Context, id, target string) error {
	p, err := c.info(id)
	if err != nil {
		return err
	}
	for _, m := range p.mounts {
		if m.Copy == 0 || m.Target != target {
			continue
		}
		if m.Source == "" {
			return fmt.Errorf("the copy at %s in pod %s was made by another core: it cannot be brought up to date", target, id)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(runtime.TarDir(pw, m.Source)) }()
		err := c.tarAt(ctx, id, copyDir(m.Copy), "copy "+m.Source+" into", stream{Stdin: pr}, "-x", "--no-same-owner")
		pr.Close()
		return err
	}
	return fmt.Errorf("pod %s has no copy at %s", id, target)
}
