// Package files moves files in and out of sessions: the file tools
// (upload, download, list), copies from and to the host roots, a stateless
// run's input files (uploaded, copied from a session, or fetched from a
// URL through the egress proxy, a caller's earlier copy revalidated) and
// the output files a session run wrote, each refusal audited with its
// rule (docs/audit.md). A session's working directory is the workspace's,
// or on a runtime whose workspaces live where the sandboxes run, the
// session's pod.
package files

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/network"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Rules a file request can break (see docs/audit.md).
const (
	RuleFilePath     = "file-path"
	RuleFileLink     = "file-link"
	RuleFileType     = "file-type"
	RuleFileNotFound = "file-not-found"
	RuleFileSize     = "file-size"
	RuleFileQuota    = "file-quota"
	RuleFileEncoding = "file-encoding"
	RuleFileOffset   = "file-offset"
	// RuleRuntimeUnsupported refuses what the configured runtime does not
	// serve yet (a session's files on Kubernetes).
	RuleRuntimeUnsupported = "runtime-unsupported"
)

// OutputDir is the directory, relative to a session's working directory,
// whose new and changed files come back with the run that wrote them.
const OutputDir = "output"

// Output files: at most this many per run, and inline bytes per run at
// most this many times the inline cap; the rest come back as links.
const (
	maxOutputFiles    = 50
	maxOutputListing  = 1000
	maxListEntries    = 1000
	inlineTotalFactor = 4
)

// Engine is what the files need of the engine: a client's session, the
// plugins' capabilities, the network it grants, and refusals audited as it
// audits them.
type Engine interface {
	Lookup(ctx context.Context, client, id, tool string) (*session.Session, error)
	Registry() *session.Registry
	PluginStatuses() []plugins.Status
	Network() *network.Grants
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Files are the files of the sessions of an engine.
type Files struct {
	eng    Engine
	cfg    config.Config
	ws     *workspace.Manager
	rec    audit.Recorder
	remote RemoteSessions   // nil: sessions' files are the workspace's directories
	roots  *hostroots.Roots // [volumes.host_roots] (hostfiles.go); nil: none
	urls   *urlCache        // URL input files by owner and URL (urlcache.go)
}

// New returns the files of eng's sessions, whose workspaces ws manages.
func New(cfg config.Config, eng Engine, ws *workspace.Manager, rec audit.Recorder) *Files {
	return &Files{eng: eng, cfg: cfg, ws: ws, rec: rec,
		urls: newURLCache(filepath.Join(cfg.Volumes.BasePath, urlCacheDir), int64(cfg.Volumes.URLCacheSize))}
}

// FileInfo describes a file written or read.
type FileInfo struct {
	Path     string
	Size     int64
	MIMEType string
	Data     []byte
}

func (w *Files) maxFileSize() int64 {
	n := int64(w.cfg.Volumes.MaxFileSize)
	if n <= 0 {
		n = 10 << 20
	}
	return n
}

func (w *Files) inlineFileSize() int64 {
	n := int64(w.cfg.Volumes.InlineFileSize)
	if n <= 0 {
		n = 256 << 10
	}
	return n
}

// MaxFileSize and InlineFileSize are the configured caps (for descriptions).
func (w *Files) MaxFileSize() int64    { return w.maxFileSize() }
func (w *Files) InlineFileSize() int64 { return w.inlineFileSize() }

// SessionFS is a session's working directory wherever it lives: a
// directory of the core's (workspace.Files), or the session's pod on a
// runtime whose workspaces live where the sandboxes run.
type SessionFS interface {
	ReadFile(rel string, max int64) ([]byte, error)
	WriteFile(rel string, data []byte) error
	List(rel string, max int) ([]workspace.Entry, bool, error)
	Snapshot(rel string, max int) map[string]workspace.Stamp
}

// RemoteSessions, when set, reaches a session's working directory by its
// internal id where the runtime keeps it (forge sets it for Kubernetes).
type RemoteSessions func(internalID string) (SessionFS, error)

// SetRemoteSessions makes the file tools reach sessions through r.
func (w *Files) SetRemoteSessions(r RemoteSessions) { w.remote = r }

// Workdir is the working directory of session internal.
func (w *Files) Workdir(internal string) (SessionFS, error) {
	if w.remote != nil {
		return w.remote(internal)
	}
	f, err := w.ws.SessionFiles(internal)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// sessionFiles finds a session of client and its working directory,
// auditing a refusal.
func (w *Files) sessionFiles(ctx context.Context, client, id, tool string) (*session.Session, SessionFS, error) {
	s, err := w.eng.Lookup(ctx, client, id, tool)
	if err != nil {
		return nil, nil, err
	}
	f, err := w.Workdir(s.Internal)
	if errors.Is(err, workspace.ErrRemote) {
		return nil, nil, w.eng.Refuse(client, id, tool, &refusal.Error{Rule: RuleRuntimeUnsupported, Msg: err.Error()}, nil)
	}
	if err != nil {
		return nil, nil, w.eng.Refuse(client, id, tool, &refusal.Error{Rule: RuleFileNotFound,
			Msg: fmt.Sprintf("session %q has no files yet: its kernel has not started (run code in it first)", id)}, nil)
	}
	return s, f, nil
}

// fileRefusal turns a workspace error into an audited refusal; other
// errors pass through.
func (w *Files) fileRefusal(client, id, tool, rel string, err error) error {
	rule := ""
	switch {
	case errors.Is(err, workspace.ErrPath):
		rule = RuleFilePath
	case errors.Is(err, workspace.ErrLink):
		rule = RuleFileLink
	case errors.Is(err, workspace.ErrNotRegular):
		rule = RuleFileType
	case errors.Is(err, workspace.ErrNotFound):
		rule = RuleFileNotFound
	case errors.Is(err, workspace.ErrTooLarge):
		rule = RuleFileSize
	case errors.Is(err, workspace.ErrNoSpace):
		rule = RuleFileQuota
	default:
		return err
	}
	msg := err.Error()
	if rule == RuleFileQuota {
		msg += fmt.Sprintf(": the session's files are limited to %s (volumes.session_quota); remove files or write less", w.cfg.Volumes.SessionQuota)
	}
	return w.eng.Refuse(client, id, tool, refusal.New(rule, "%s", msg), map[string]any{"path": auditPath(rel)})
}

// auditPath keeps a hostile path short in the audit log.
func auditPath(p string) string {
	if len(p) > 200 || !utf8.ValidString(p) {
		return fmt.Sprintf("%q… (%d bytes)", p[:min(len(p), 64)], len(p))
	}
	return p
}

// CheckFull audits a session workspace that has just filled its
// kernel-enforced quota (one statfs; one line per fill, whichever of the
// engine or the host services sees it first): after each execute, and when
// a file tool finds no space.
func (w *Files) CheckFull(s *session.Session, tool string) {
	if f, ok := w.sessionFill(s.Internal); ok {
		w.rec.Record(f.Entry(w.ws.Quota(), s.Internal, map[string]any{"session": s.ID, "tool": tool, "backend": s.Backend}))
	}
}

// remoteUsage is a session's working directory that lives in its sandbox
// and can measure its filesystem there (hostsvc.SessionFS).
type remoteUsage interface {
	Usage() (runtime.FSUsage, error)
}

// sessionFill is workspace.Manager.CheckFull of session internal's
// workspace, measured where it lives: on a runtime whose workspaces live
// in their sandboxes the core's copy never fills, the sandbox's does.
func (w *Files) sessionFill(internal string) (workspace.Fill, bool) {
	path := w.ws.SessionPath(internal)
	if w.remote == nil {
		return w.ws.CheckFull(path)
	}
	f, err := w.remote(internal)
	if err != nil {
		return workspace.Fill{}, false // no sandbox now: nothing fills
	}
	r, ok := f.(remoteUsage)
	if !ok {
		return workspace.Fill{}, false
	}
	u, err := r.Usage()
	if err != nil {
		return workspace.Fill{}, false
	}
	return w.ws.CheckFullOf(path, u.Size, u.Free, u.NoInodes)
}

// UploadFile writes content (text, or base64 with encoding "base64") to rel
// in a session's working directory, where its code finds it.
func (w *Files) UploadFile(client, id, rel, content, encoding string) (FileInfo, error) {
	const tool = "upload_file"
	s, f, err := w.sessionFiles(context.Background(), client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	clean, err := workspace.CleanPath(rel)
	if err != nil {
		return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
	}
	var data []byte
	switch encoding {
	case "", "text":
		data = []byte(content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(content)); err != nil {
			return FileInfo{}, w.eng.Refuse(client, id, tool, refusal.New(RuleFileEncoding, "content of %s is not valid base64 (standard alphabet, with padding): %v", refusal.Quoted(rel), err), map[string]any{"path": auditPath(rel)})
		}
	default:
		return FileInfo{}, w.eng.Refuse(client, id, tool, refusal.New(RuleFileEncoding, "encoding %s: use \"text\" or \"base64\"", refusal.Quoted(encoding)), nil)
	}
	if max := w.maxFileSize(); int64(len(data)) > max {
		return FileInfo{}, w.eng.Refuse(client, id, tool, refusal.New(RuleFileSize, "%s is %d bytes, over the %s limit of one file (volumes.max_file_size)", refusal.Quoted(rel), len(data), config.FormatSize(max)), map[string]any{"path": auditPath(rel), "bytes": len(data)})
	}
	if err := w.room(s, f, client, id, tool, rel, int64(len(data))); err != nil {
		return FileInfo{}, err
	}
	if err := w.writeSessionFile(s, f, client, id, tool, clean, func() error { return f.WriteFile(clean, data) }); err != nil {
		return FileInfo{}, err
	}
	w.eng.Registry().Touch(s)
	// session_id is the internal id, as on every session line (docs/audit.md):
	// the caller's id alone is ambiguous between clients.
	w.rec.Record(audit.Entry{Event: "file.upload", SessionID: s.Internal, UserID: client, Success: true, Details: map[string]any{"session": s.ID, "path": clean, "bytes": len(data)}})
	return FileInfo{Path: clean, Size: int64(len(data)), MIMEType: mimeType(clean, data)}, nil
}

// room refuses a file of n bytes that cannot fit in session s's working
// directory before anything is written: a full workspace would otherwise
// also fail the session's own next write.
func (w *Files) room(s *session.Session, f SessionFS, client, id, tool, rel string, n int64) error {
	var st unix.Statfs_t
	if local, ok := f.(*workspace.Files); ok && unix.Statfs(local.Root(), &st) == nil {
		if free := int64(st.Bavail) * st.Bsize; n > free {
			w.CheckFull(s, tool) // refused for want of space: perhaps none is left
			return w.fileRefusal(client, id, tool, rel, fmt.Errorf("%w: %s is %d bytes and the session's workspace has %d bytes free", workspace.ErrNoSpace, refusal.Quoted(rel), n, free))
		}
	}
	if q := w.ws.Quota(); q > 0 && !w.ws.Enforced() && w.remote == nil {
		if used, _ := (&workspace.Workspace{Path: w.ws.SessionPath(s.Internal)}).Usage(q); used+n > q {
			return w.fileRefusal(client, id, tool, rel, fmt.Errorf("%w: %s is %d bytes and the session already holds %d", workspace.ErrNoSpace, refusal.Quoted(rel), n, used))
		}
	}
	return nil
}

// writeSessionFile runs write (of clean, in session s) as a file tool
// writes: the listings of output/ told, a full workspace noticed, a
// failure refused with its rule.
func (w *Files) writeSessionFile(s *session.Session, f SessionFS, client, id, tool, clean string, write func() error) error {
	// Before and after the write: an execute's listing taken meanwhile is
	// not kept as the directory's state either way.
	if strings.HasPrefix(clean, OutputDir+"/") {
		s.Wrote()
		defer s.Wrote()
	}
	if err := write(); err != nil {
		if errors.Is(err, workspace.ErrNoSpace) {
			w.CheckFull(s, tool)
		}
		return w.fileRefusal(client, id, tool, clean, err)
	}
	return nil
}

// ReadFile reads rel from a session's working directory for download_file
// (tool) or resources/read.
func (w *Files) ReadFile(client, id, rel, tool string) (FileInfo, error) {
	s, f, err := w.sessionFiles(context.Background(), client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	clean, err := workspace.CleanPath(rel)
	if err == nil {
		var data []byte
		if data, err = f.ReadFile(clean, w.maxFileSize()); err == nil {
			w.eng.Registry().Touch(s)
			w.rec.Record(audit.Entry{Event: "file.download", SessionID: s.Internal, UserID: client, Success: true, Details: map[string]any{"session": s.ID, "path": clean, "bytes": len(data), "tool": tool}})
			return FileInfo{Path: clean, Size: int64(len(data)), MIMEType: mimeType(clean, data), Data: data}, nil
		}
	}
	if errors.Is(err, workspace.ErrTooLarge) {
		err = fmt.Errorf("%w (volumes.max_file_size %s); have the code split or compress it", err, config.FormatSize(w.maxFileSize()))
	}
	return FileInfo{}, w.fileRefusal(client, id, tool, rel, err)
}

// ReadFileFrom is ReadFile for a read that starts at offset (a file larger
// than one answer is read in parts): an offset outside the file is refused.
func (w *Files) ReadFileFrom(client, id, rel, tool string, offset int64) (FileInfo, error) {
	fi, err := w.ReadFile(client, id, rel, tool)
	if err == nil && (offset < 0 || offset > fi.Size || (offset == fi.Size && fi.Size > 0)) {
		err = w.eng.Refuse(client, id, tool, refusal.New(RuleFileOffset, "offset %d is outside %s, which is %d bytes: give 0 to %d", offset, fi.Path, fi.Size, max(fi.Size-1, 0)),
			map[string]any{"path": auditPath(fi.Path), "offset": offset})
		return FileInfo{}, err
	}
	return fi, err
}

// ListFiles lists dir (default: the whole working directory) of a session
// without following links.
func (w *Files) ListFiles(client, id, dir string) ([]workspace.Entry, bool, error) {
	const tool = "list_files"
	s, f, err := w.sessionFiles(context.Background(), client, id, tool)
	if err != nil {
		return nil, false, err
	}
	if dir == "" {
		dir = "."
	}
	// Checked here, before any runtime's own way to the files: the same
	// path is refused by the same rule wherever the session runs.
	clean, err := workspace.CleanPath(dir)
	if err != nil {
		return nil, false, w.fileRefusal(client, id, tool, dir, err)
	}
	entries, truncated, err := f.List(clean, maxListEntries)
	if err != nil {
		return nil, false, w.fileRefusal(client, id, tool, dir, err)
	}
	w.eng.Registry().Touch(s)
	return entries, truncated, nil
}

// OutputSnapshot stamps the files in a session's output directory before a
// run, so that afterwards only what the run wrote comes back.
func (w *Files) OutputSnapshot(id string) map[string]workspace.Stamp {
	if w.remote == nil && !w.ws.SessionHasDir(id, OutputDir) {
		return nil // no output directory (most sessions): one lstat, no walk
	}
	f, err := w.Workdir(id)
	if err != nil {
		return nil // no working directory yet: everything after the run is new
	}
	return f.Snapshot(OutputDir, maxOutputListing)
}

// OutputFiles returns the files of the output directory that are new or
// changed since before: small ones with their content, within a total;
// and the directory's listing it compared (nil: none taken).
func (w *Files) OutputFiles(id string, before map[string]workspace.Stamp) ([]engine.OutputFile, []string, map[string]workspace.Stamp) {
	if w.remote == nil && !w.ws.SessionHasDir(id, OutputDir) {
		return nil, nil, nil // none before or after the run (or the run removed it)
	}
	f, err := w.Workdir(id)
	if err != nil {
		return nil, nil, nil
	}
	after := f.Snapshot(OutputDir, maxOutputListing)
	var changed []string
	for p, st := range after {
		if old, ok := before[p]; !ok || old != st {
			changed = append(changed, p)
		}
	}
	sort.Strings(changed)
	var notices []string
	if len(changed) > maxOutputFiles {
		notices = append(notices, fmt.Sprintf("the run wrote %d files to %s/: the first %d are returned; list_files shows all", len(changed), OutputDir, maxOutputFiles))
		changed = changed[:maxOutputFiles]
	}
	inline, budget := w.inlineFileSize(), inlineTotalFactor*w.inlineFileSize()
	var out []engine.OutputFile
	for _, p := range changed {
		of := engine.OutputFile{Path: p, Size: after[p].Size, MIMEType: mimeType(p, nil)}
		if of.Size <= inline && of.Size <= budget {
			if data, err := f.ReadFile(p, inline); err == nil {
				of.Data, of.Size = data, int64(len(data))
				of.MIMEType = mimeType(p, data)
				budget -= of.Size
			}
		}
		out = append(out, of)
	}
	return out, notices, after
}

// Types Go's table lacks, for files analyses write.
var extraTypes = map[string]string{
	".csv": "text/csv", ".tsv": "text/tab-separated-values", ".txt": "text/plain", ".md": "text/markdown",
	".json": "application/json", ".parquet": "application/vnd.apache.parquet", ".rds": "application/octet-stream",
	".py": "text/x-python", ".r": "text/x-r", ".yaml": "application/yaml", ".yml": "application/yaml",
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml", ".pdf": "application/pdf",
	".html": "text/html", ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}

// mimeType guesses a file's type from its name, else from its content.
func mimeType(name string, data []byte) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := extraTypes[ext]; ok {
		return t
	}
	if t := mime.TypeByExtension(ext); t != "" {
		return strings.TrimSuffix(t, "; charset=utf-8")
	}
	if data != nil {
		return strings.TrimSuffix(http.DetectContentType(data), "; charset=utf-8")
	}
	return "application/octet-stream"
}
