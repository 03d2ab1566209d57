package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podexec"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// seed streams the core's copy of the workspace into the seed container as
// a tar. The copy is the core's own (the sandbox never saw it), read
// without following links: a link is sent as a link.
func (c *Client) seed(ctx context.Context, id, dir string, mounts []podspec.Mount) error {
	trees := []runtime.Tree{{Dir: dir, Prefix: path.Base(podspec.WorkspaceDir)}}
	for _, m := range mounts {
		if m.Copy > 0 {
			trees = append(trees, runtime.Tree{Dir: m.Source, Prefix: strings.TrimPrefix(podspec.CopyDir(m.Copy), podspec.SeedRoot+"/")})
		}
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(runtime.TarTrees(pw, trees...)) }()
	var errb bytes.Buffer
	_, err := c.exec(ctx, id, podexec.Stream{Container: podspec.Seed, Stdin: pr, Stderr: &errb})
	pr.Close()
	if err != nil {
		return fmt.Errorf("attach to the seed container: %w %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return nil
}

// servedPath is rel as the file service takes it (relative to the
// workspace), refused here already if it leaves the workspace.
func servedPath(rel string) (string, error) {
	p, err := wsPath(rel)
	if p == podspec.WorkspaceDir {
		return ".", err
	}
	return strings.TrimPrefix(p, podspec.WorkspaceDir+"/"), err
}

// wsPath is rel's place in the keeper's view of the workspace; rel is
// relative and clean (the core checked it), and a path leaving the
// workspace is refused again here rather than clamped to its root: a
// caller that joined a '..' onto a directory of the workspace would
// otherwise reach the rest of it.
func wsPath(rel string) (string, error) {
	if strings.Contains(rel, "\x00") {
		return "", fmt.Errorf("path %q: %w", rel, runtime.ErrNoFile)
	}
	clean := path.Clean(rel)
	if path.IsAbs(rel) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q: %w", rel, runtime.ErrPath)
	}
	if clean == "." {
		return podspec.WorkspaceDir, nil
	}
	return podspec.WorkspaceDir + "/" + clean, nil
}

// ask runs op on rel in pod id's file service; a refusal comes back as
// the runtime's error for it.
func (c *Client) ask(ctx context.Context, id, rel string, req agent.Request, data []byte) (agent.Response, []byte, error) {
	p, err := servedPath(rel)
	if err != nil {
		return agent.Response{}, nil, err
	}
	req.Path = p
	res, out, err := c.keep(ctx, id, req, data)
	if err != nil {
		return res, nil, err
	}
	return res, out, fileErr(string(req.Op)+" "+rel, req.Max, res)
}

// fileErr is the runtime's error for a file service's refusal (nil: none).
func fileErr(what string, max int64, res agent.Response) error {
	var kind error
	switch res.Code {
	case agent.OK:
		return nil
	case agent.NoFile:
		kind = runtime.ErrNoFile
	case agent.TooLarge:
		return fmt.Errorf("%s: %d bytes, over %d: %w", what, res.Size, max, runtime.ErrTooLarge)
	case agent.NoSpace:
		kind = runtime.ErrNoSpace
	case agent.Link:
		kind = runtime.ErrLink
	case agent.NotDir:
		// As a workspace of the core's answers (file-type, not file-not-found).
		return fmt.Errorf("%s: not a directory: %w", what, runtime.ErrNotRegular)
	case agent.NotRegular:
		kind = runtime.ErrNotRegular
	case agent.BadPath:
		kind = runtime.ErrPath
	default:
		return fmt.Errorf("%s: %s", what, res.Error)
	}
	return fmt.Errorf("%s: %s: %w", what, res.Error, kind)
}

// ReadDir implements runtime.RemoteWorkspace: the regular files directly
// in rel (none if it is no directory), with the contents of those within
// the caps. A link is never followed, nor listed.
func (c *Client) ReadDir(ctx context.Context, id, rel string, maxFile, maxTotal int64) ([]runtime.File, error) {
	res, data, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpReadDir, Max: maxFile, MaxTotal: maxTotal}, nil)
	if errors.Is(err, runtime.ErrNoFile) {
		return nil, nil // no such directory: no files
	}
	if err != nil {
		return nil, err
	}
	out := make([]runtime.File, 0, len(res.Files))
	for _, f := range res.Files {
		file := runtime.File{Name: f.Name, Size: f.Size, Skipped: !f.Data}
		if f.Data {
			if f.Size < 0 || int64(len(data)) < f.Size {
				return nil, errors.New("read directory: a truncated file")
			}
			file.Data, data = data[:f.Size:f.Size], data[f.Size:]
		}
		out = append(out, file)
	}
	return out, nil
}

// ReadFile implements runtime.RemoteWorkspace.
func (c *Client) ReadFile(ctx context.Context, id, rel string, max int64) ([]byte, error) {
	_, data, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpRead, Max: max}, nil)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// ListFiles implements runtime.RemoteWorkspace.
func (c *Client) ListFiles(ctx context.Context, id, rel string, max int) ([]runtime.Entry, bool, error) {
	res, _, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpList, Max: int64(max)}, nil)
	if err != nil {
		return nil, false, err
	}
	out := make([]runtime.Entry, 0, len(res.Entries))
	for _, e := range res.Entries {
		out = append(out, runtime.Entry{Type: e.Type, Size: e.Size, Modified: time.Unix(0, e.Modified), Ino: e.Ino, Path: e.Path})
	}
	return out, res.More, nil
}

// WriteFile implements runtime.RemoteWorkspace: a new file renamed over
// rel; replaceLink replaces a link there (never writing through it).
func (c *Client) WriteFile(ctx context.Context, id, rel string, data []byte, replaceLink bool) error {
	_, _, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpWrite, Replace: replaceLink}, data)
	return err
}

// WorkspaceUsage implements runtime.WorkspaceUsage: the pod's workspace
// is its own filesystem (an emptyDir; a tmpfs of the quota's size with
// workspace_medium Memory).
func (c *Client) WorkspaceUsage(ctx context.Context, id string) (runtime.FSUsage, error) {
	res, _, err := c.ask(ctx, id, ".", agent.Request{Op: agent.OpStatfs}, nil)
	if err != nil {
		return runtime.FSUsage{}, err
	}
	return usageOf(res.Statfs)
}

func usageOf(st *agent.Statfs) (runtime.FSUsage, error) {
	if st == nil || st.BlockSize <= 0 || st.Blocks > 1<<62/uint64(st.BlockSize) || st.Avail > st.Blocks {
		return runtime.FSUsage{}, fmt.Errorf("statfs of the workspace: %+v is not a filesystem's", st)
	}
	return runtime.FSUsage{Size: st.BlockSize * int64(st.Blocks), Free: st.BlockSize * int64(st.Avail), NoInodes: st.Files > 0 && st.FilesFree == 0}, nil
}

// FileSize implements runtime.RemoteWorkspace.
func (c *Client) FileSize(ctx context.Context, id, rel string) (int64, error) {
	res, _, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpStat}, nil)
	return res.Size, err
}

// RemoveFile implements runtime.RemoteWorkspace.
func (c *Client) RemoveFile(ctx context.Context, id, rel string) error {
	_, _, err := c.ask(ctx, id, rel, agent.Request{Op: agent.OpRemove, Replace: true}, nil)
	return err
}

// TarOut implements runtime.RemoteWorkspace: tar in the keeper (its own
// exec: a workspace is larger than a file service answer), which archives
// links as links.
func (c *Client) TarOut(ctx context.Context, id, rel string, w io.Writer) error {
	return c.tar(ctx, id, rel, "copy out of", podexec.Stream{Stdout: w}, "-c", ".")
}

// TarIn implements runtime.RemoteWorkspace.
func (c *Client) TarIn(ctx context.Context, id, rel string, r io.Reader) error {
	return c.tar(ctx, id, rel, "copy into", podexec.Stream{Stdin: r}, "-x", "--no-same-owner")
}

// tar runs the keeper's tar in rel's directory with s's streams.
func (c *Client) tar(ctx context.Context, id, rel, what string, s podexec.Stream, args ...string) error {
	dir, err := wsPath(rel)
	if err != nil {
		return err
	}
	return c.tarAt(ctx, id, dir, what, s, args...)
}

// tarAt runs the keeper's tar in its directory dir.
func (c *Client) tarAt(ctx context.Context, id, dir, what string, s podexec.Stream, args ...string) error {
	errb := runtime.Capped{Max: 4096}
	s.Container, s.Stderr = podspec.Keeper, &errb
	s.Command = append([]string{"tar", "-f", "-", "-C", dir}, args...)
	code, err := c.exec(ctx, id, s)
	if err == nil && code != 0 {
		err = fmt.Errorf("tar exited %d: %s", code, bytes.TrimSpace(errb.Buf.Bytes()))
		if bytes.Contains(errb.Buf.Bytes(), []byte("No space left")) {
			err = fmt.Errorf("%w: %v", runtime.ErrNoSpace, err)
		}
	}
	return fail(what, id, err)
}

// DialSocket implements runtime.RemoteWorkspace: an exec in the keeper
// relays the socket; the caller gets one end of a socketpair, so that it
// has deadlines and half-close like any unix connection.
func (c *Client) DialSocket(ctx context.Context, id, target string) (net.Conn, error) {
	p, err := c.info(id)
	if err != nil {
		return nil, err
	}
	rel, ok := socketPlace(p.mounts, target)
	if !ok {
		return nil, fmt.Errorf("%s is under no mount of the workspace", target)
	}
	sp, err := wsPath(rel)
	if err != nil {
		return nil, err
	}
	// The relay lives as long as the connection, not as the Dial's context:
	// cut ends it when the caller has closed its end, or the Dial failed.
	rctx, cut := context.WithCancel(context.WithoutCancel(ctx))
	// A pod handed to another core (forget) cuts it too: a plugin that
	// keeps the other end reaches nothing more.
	c.mu.Lock()
	if c.pods[id] != p {
		c.mu.Unlock() // forgotten meanwhile (removed, or handed over)
		cut()
		return nil, fmt.Errorf("pod %s is no longer this core's", id)
	}
	if p.dials == nil {
		p.dials = map[*context.CancelFunc]bool{}
	}
	p.dials[&cut] = true
	c.mu.Unlock()
	return runtime.DialRelay(ctx, rctx, cut, target+" in pod "+id, func(rctx context.Context, in io.Reader, out, errw io.Writer) (int, error) {
		defer func() {
			c.mu.Lock()
			delete(p.dials, &cut)
			c.mu.Unlock()
		}()
		return c.exec(rctx, id, podexec.Stream{Container: podspec.Keeper, Command: podspec.AgentCmd("dial", sp), Stdin: in, Stdout: out, Stderr: errw})
	})
}

// socketPlace is the workspace path of a socket at target in the sandbox.
func socketPlace(mounts []podspec.Mount, target string) (string, bool) {
	best := -1
	for i, m := range mounts {
		if m.ReadOnly {
			continue
		}
		if target == m.Target || strings.HasPrefix(target, strings.TrimSuffix(m.Target, "/")+"/") {
			if best < 0 || len(m.Target) > len(mounts[best].Target) {
				best = i
			}
		}
	}
	if best < 0 {
		return "", false
	}
	m := mounts[best]
	rest := strings.TrimPrefix(strings.TrimPrefix(target, strings.TrimSuffix(m.Target, "/")), "/")
	return path.Join(m.Rel, rest), true
}
