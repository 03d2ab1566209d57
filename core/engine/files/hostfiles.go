package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Host roots ([volumes.host_roots], docs/session-data.md): a session's
// files copied from and to directories of the server's machine by the
// core, the bytes never passing through MCP.

// Rules of host-root refusals.
const (
	RuleHostRoot         = hostroots.RuleUnknown // a root that does not exist or is not the caller's
	RuleHostRootReadOnly = "host-root-read-only" // a write into a root that is not writable
)

// Audit events of host-root copies.
const (
	EventHostRead  = "files.host_read"
	EventHostWrite = "files.host_write"
)

// SetHostRoots lets sessions copy files from and to roots.
func (w *Files) SetHostRoots(r *hostroots.Roots) { w.roots = r }

// HostRoots lists the roots client may use.
func (w *Files) HostRoots(client string) []*hostroots.Root {
	if w.roots == nil {
		return nil
	}
	return w.roots.For(client)
}

// root is client's root name, refused (audited) when unknown to it, or
// read-only and write.
func (w *Files) root(client, id, tool, name string, write bool) (*hostroots.Root, error) {
	if w.roots == nil {
		return nil, w.eng.Refuse(client, id, tool, refusal.New(RuleHostRoot, "this server has no host roots (volumes.host_roots): put the file into the session with upload_file"), nil)
	}
	r, err := w.roots.Get(client, name, write)
	if err != nil {
		rule := RuleHostRoot
		if errors.Is(err, hostroots.ErrReadOnly) {
			rule = RuleHostRootReadOnly
		}
		return nil, w.eng.Refuse(client, id, tool, refusal.New(rule, "%v", err), map[string]any{"root": auditPath(name)})
	}
	return r, nil
}

// ListHostFiles lists dir of root for client.
func (w *Files) ListHostFiles(client, root, dir string) ([]workspace.Entry, bool, error) {
	const tool = "list_host_files"
	r, err := w.root(client, "", tool, root, false)
	if err != nil {
		return nil, false, err
	}
	if dir == "" {
		dir = "."
	}
	entries, truncated, err := r.Files().List(dir, maxListEntries)
	if err != nil {
		return nil, false, w.fileRefusal(client, "", tool, dir, err)
	}
	return entries, truncated, nil
}

// ImportFile copies rootPath of root into session id's working directory
// at rel (default: the file's name), streamed within the session's quota.
func (w *Files) ImportFile(ctx context.Context, client, id, root, rootPath, rel string) (FileInfo, error) {
	const tool = "import_file"
	r, err := w.root(client, id, tool, root, false)
	if err != nil {
		return FileInfo{}, err
	}
	s, f, err := w.sessionFiles(ctx, client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	src, err := workspace.CleanPath(rootPath)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rootPath, fmt.Errorf("root_path: %w", err))
	}
	if rel == "" {
		rel = path.Base(src)
	}
	clean, err := workspace.CleanPath(rel)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
	}
	in, size, err := r.Files().Open(src)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rootPath, fmt.Errorf("%s: %w", root, err))
	}
	defer in.Close()
	if err := w.room(s, f, client, id, tool, clean, size); err != nil {
		return FileInfo{}, err
	}
	// The size checked is the size copied: a file growing meanwhile is cut
	// there, not let past the quota.
	body := io.LimitReader(in, size)
	write := func() error {
		if local, ok := f.(*workspace.Files); ok {
			return local.WriteFrom(clean, body)
		}
		// A remote session's files go in one message: bounded as uploads.
		if max := w.maxFileSize(); size > max {
			return fmt.Errorf("%w: %s is %d bytes; on this runtime a file is copied whole, at most %d bytes (volumes.max_file_size)", workspace.ErrTooLarge, refusal.Quoted(rootPath), size, max)
		}
		data, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		return f.WriteFile(clean, data)
	}
	if err := w.writeSessionFile(s, f, client, id, tool, clean, write); err != nil {
		return FileInfo{}, err
	}
	w.eng.Registry().Touch(s)
	w.rec.Record(audit.Entry{Event: EventHostRead, SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": s.ID, "root": root, "root_path": src, "path": clean, "bytes": size}})
	return FileInfo{Path: clean, Size: size, MIMEType: mimeType(clean, nil)}, nil
}

// ExportFile copies rel of session id's working directory into root (it
// must be writable) at rootPath (default: the file's name), replacing a
// file there.
func (w *Files) ExportFile(ctx context.Context, client, id, rel, root, rootPath string) (FileInfo, error) {
	const tool = "export_file"
	r, err := w.root(client, id, tool, root, true)
	if err != nil {
		return FileInfo{}, err
	}
	s, f, err := w.sessionFiles(ctx, client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	clean, err := workspace.CleanPath(rel)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
	}
	if rootPath == "" {
		rootPath = path.Base(clean)
	}
	dst, err := workspace.CleanPath(rootPath)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rootPath, fmt.Errorf("root_path: %w", err))
	}
	var body io.Reader
	var size int64
	if local, ok := f.(*workspace.Files); ok {
		in, n, err := local.Open(clean)
		if err != nil {
			return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
		}
		defer in.Close()
		body, size = io.LimitReader(in, n), n
	} else {
		data, err := f.ReadFile(clean, w.maxFileSize())
		if err != nil {
			return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
		}
		body, size = bytes.NewReader(data), int64(len(data))
	}
	if err := r.Files().WriteFrom(dst, body); err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rootPath, fmt.Errorf("%s: %w", root, err))
	}
	w.eng.Registry().Touch(s)
	w.rec.Record(audit.Entry{Event: EventHostWrite, SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": s.ID, "root": root, "root_path": dst, "path": clean, "bytes": size}})
	return FileInfo{Path: dst, Size: size, MIMEType: mimeType(dst, nil)}, nil
}
