package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
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

// OutputFile is a file a run wrote to OutputDir.
type OutputFile struct {
	Path     string // relative to the working directory: output/result.csv
	Size     int64
	MIMEType string
	Data     []byte // the content when it is small enough to inline; nil: a link
}

// FileInfo describes a file written or read.
type FileInfo struct {
	Path     string
	Size     int64
	MIMEType string
	Data     []byte
}

func (e *Engine) maxFileSize() int64 {
	n := int64(e.cfg.Volumes.MaxFileSize)
	if n <= 0 {
		n = 10 << 20
	}
	return n
}

func (e *Engine) inlineFileSize() int64 {
	n := int64(e.cfg.Volumes.InlineFileSize)
	if n <= 0 {
		n = 256 << 10
	}
	return n
}

// MaxFileSize and InlineFileSize are the configured caps (for descriptions).
func (e *Engine) MaxFileSize() int64    { return e.maxFileSize() }
func (e *Engine) InlineFileSize() int64 { return e.inlineFileSize() }

// SessionFS is a session's working directory wherever it lives: a
// directory of the core's (workspace.Files), or the session's pod on a
// runtime whose workspaces live where the sandboxes run.
type SessionFS interface {
	ReadFile(rel string, max int64) ([]byte, error)
	WriteFile(rel string, data []byte) error
	List(rel string, max int) ([]workspace.Entry, bool, error)
	Snapshot(rel string, max int) map[string]workspace.Stamp
}

// CheckpointFS is a session's working directory as a checkpoint copies
// it out and back in.
type CheckpointFS interface {
	SessionFS
	RegularSize(rel string) (int64, error)
	Remove(rel string) error
	// CopyOut copies the tree into dst on the core's host, at most limit
	// bytes, and names what it left out (links, pipes).
	CopyOut(dst string, limit int64, skip func(string) bool) (left []string, used int64, err error)
	// CopyIn writes the regular files of src (as CopyOut made it) back.
	CopyIn(src string) error
}

// checkpointFS is the working directory of session internal, for a
// checkpoint.
func (e *Engine) checkpointFS(internal string) (CheckpointFS, error) {
	f, err := e.sessionFS(internal)
	if err != nil {
		return nil, err
	}
	c, ok := f.(CheckpointFS)
	if !ok {
		return nil, workspace.ErrRemote
	}
	return c, nil
}

// RemoteSessions, when set, reaches a session's working directory by its
// internal id where the runtime keeps it (forge sets it for Kubernetes).
type RemoteSessions func(internalID string) (SessionFS, error)

// SetRemoteSessions makes the file tools reach sessions through r.
func (e *Engine) SetRemoteSessions(r RemoteSessions) { e.remote = r }

// sessionFS is the working directory of session internal.
func (e *Engine) sessionFS(internal string) (SessionFS, error) {
	if e.remote != nil {
		return e.remote(internal)
	}
	f, err := e.ws.SessionFiles(internal)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// sessionFiles finds a session of client and its working directory,
// auditing a refusal.
func (e *Engine) sessionFiles(ctx context.Context, client, id, tool string) (*session.Session, SessionFS, error) {
	s, err := e.lookup(ctx, client, id, tool)
	if err != nil {
		return nil, nil, err
	}
	f, err := e.sessionFS(s.Internal)
	if errors.Is(err, workspace.ErrRemote) {
		return nil, nil, e.refuse(client, id, tool, &RequestError{Rule: RuleRuntimeUnsupported, Msg: err.Error()}, nil)
	}
	if err != nil {
		return nil, nil, e.refuse(client, id, tool, &RequestError{Rule: RuleFileNotFound,
			Msg: fmt.Sprintf("session %q has no files yet: its kernel has not started (run code in it first)", id)}, nil)
	}
	return s, f, nil
}

// fileRefusal turns a workspace error into an audited refusal; other
// errors pass through.
func (e *Engine) fileRefusal(client, id, tool, rel string, err error) error {
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
		msg += fmt.Sprintf(": the session's files are limited to %s (volumes.session_quota); remove files or write less", e.cfg.Volumes.SessionQuota)
	}
	return e.refuse(client, id, tool, refusal.New(rule, "%s", msg), map[string]any{"path": auditPath(rel)})
}

// auditPath keeps a hostile path short in the audit log.
func auditPath(p string) string {
	if len(p) > 200 || !utf8.ValidString(p) {
		return fmt.Sprintf("%q… (%d bytes)", p[:min(len(p), 64)], len(p))
	}
	return p
}

// checkFull audits a session workspace that has just filled its
// kernel-enforced quota (one statfs; one line per fill, whichever of the
// engine or the host services sees it first): after each execute, and when
// a file tool finds no space.
func (e *Engine) checkFull(s *session.Session, tool string) {
	if f, ok := e.sessionFill(s.Internal); ok {
		e.rec.Record(f.Entry(e.ws.Quota(), s.Internal, map[string]any{"session": s.ID, "tool": tool, "backend": s.Backend}))
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
func (e *Engine) sessionFill(internal string) (workspace.Fill, bool) {
	path := e.ws.SessionPath(internal)
	if e.remote == nil {
		return e.ws.CheckFull(path)
	}
	f, err := e.remote(internal)
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
	return e.ws.CheckFullOf(path, u.Size, u.Free, u.NoInodes)
}

// UploadFile writes content (text, or base64 with encoding "base64") to rel
// in a session's working directory, where its code finds it.
func (e *Engine) UploadFile(client, id, rel, content, encoding string) (FileInfo, error) {
	const tool = "upload_file"
	s, f, err := e.sessionFiles(context.Background(), client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	clean, err := workspace.CleanPath(rel)
	if err != nil {
		return FileInfo{}, e.fileRefusal(client, id, tool, rel, err)
	}
	var data []byte
	switch encoding {
	case "", "text":
		data = []byte(content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(content)); err != nil {
			return FileInfo{}, e.refuse(client, id, tool, refusal.New(RuleFileEncoding, "content of %s is not valid base64 (standard alphabet, with padding): %v", quoted(rel), err), map[string]any{"path": auditPath(rel)})
		}
	default:
		return FileInfo{}, e.refuse(client, id, tool, refusal.New(RuleFileEncoding, "encoding %s: use \"text\" or \"base64\"", quoted(encoding)), nil)
	}
	if max := e.maxFileSize(); int64(len(data)) > max {
		return FileInfo{}, e.refuse(client, id, tool, refusal.New(RuleFileSize, "%s is %d bytes, over the %s limit of one file (volumes.max_file_size)", quoted(rel), len(data), config.FormatSize(max)), map[string]any{"path": auditPath(rel), "bytes": len(data)})
	}
	if err := e.room(s, f, client, id, tool, rel, int64(len(data))); err != nil {
		return FileInfo{}, err
	}
	if err := e.writeSessionFile(s, f, client, id, tool, clean, func() error { return f.WriteFile(clean, data) }); err != nil {
		return FileInfo{}, err
	}
	e.sessions.Touch(s)
	// session_id is the internal id, as on every session line (docs/audit.md):
	// the caller's id alone is ambiguous between clients.
	e.rec.Record(audit.Entry{Event: "file.upload", SessionID: s.Internal, UserID: client, Success: true, Details: map[string]any{"session": s.ID, "path": clean, "bytes": len(data)}})
	return FileInfo{Path: clean, Size: int64(len(data)), MIMEType: mimeType(clean, data)}, nil
}

// room refuses a file of n bytes that cannot fit in session s's working
// directory before anything is written: a full workspace would otherwise
// also fail the session's own next write.
func (e *Engine) room(s *session.Session, f SessionFS, client, id, tool, rel string, n int64) error {
	var st unix.Statfs_t
	if local, ok := f.(*workspace.Files); ok && unix.Statfs(local.Root(), &st) == nil {
		if free := int64(st.Bavail) * st.Bsize; n > free {
			e.checkFull(s, tool) // refused for want of space: perhaps none is left
			return e.fileRefusal(client, id, tool, rel, fmt.Errorf("%w: %s is %d bytes and the session's workspace has %d bytes free", workspace.ErrNoSpace, quoted(rel), n, free))
		}
	}
	if q := e.ws.Quota(); q > 0 && !e.ws.Enforced() && e.remote == nil {
		if used, _ := (&workspace.Workspace{Path: e.ws.SessionPath(s.Internal)}).Usage(q); used+n > q {
			return e.fileRefusal(client, id, tool, rel, fmt.Errorf("%w: %s is %d bytes and the session already holds %d", workspace.ErrNoSpace, quoted(rel), n, used))
		}
	}
	return nil
}

// writeSessionFile runs write (of clean, in session s) as a file tool
// writes: the listings of output/ told, a full workspace noticed, a
// failure refused with its rule.
func (e *Engine) writeSessionFile(s *session.Session, f SessionFS, client, id, tool, clean string, write func() error) error {
	// Before and after the write: an execute's listing taken meanwhile is
	// not kept as the directory's state either way.
	if strings.HasPrefix(clean, OutputDir+"/") {
		s.Wrote()
		defer s.Wrote()
	}
	if err := write(); err != nil {
		if errors.Is(err, workspace.ErrNoSpace) {
			e.checkFull(s, tool)
		}
		return e.fileRefusal(client, id, tool, clean, err)
	}
	return nil
}

// ReadFile reads rel from a session's working directory for download_file
// (tool) or resources/read.
func (e *Engine) ReadFile(client, id, rel, tool string) (FileInfo, error) {
	s, f, err := e.sessionFiles(context.Background(), client, id, tool)
	if err != nil {
		return FileInfo{}, err
	}
	clean, err := workspace.CleanPath(rel)
	if err == nil {
		var data []byte
		if data, err = f.ReadFile(clean, e.maxFileSize()); err == nil {
			e.sessions.Touch(s)
			e.rec.Record(audit.Entry{Event: "file.download", SessionID: s.Internal, UserID: client, Success: true, Details: map[string]any{"session": s.ID, "path": clean, "bytes": len(data), "tool": tool}})
			return FileInfo{Path: clean, Size: int64(len(data)), MIMEType: mimeType(clean, data), Data: data}, nil
		}
	}
	if errors.Is(err, workspace.ErrTooLarge) {
		err = fmt.Errorf("%w (volumes.max_file_size %s); have the code split or compress it", err, config.FormatSize(e.maxFileSize()))
	}
	return FileInfo{}, e.fileRefusal(client, id, tool, rel, err)
}

// ReadFileFrom is ReadFile for a read that starts at offset (a file larger
// than one answer is read in parts): an offset outside the file is refused.
func (e *Engine) ReadFileFrom(client, id, rel, tool string, offset int64) (FileInfo, error) {
	fi, err := e.ReadFile(client, id, rel, tool)
	if err == nil && (offset < 0 || offset > fi.Size || (offset == fi.Size && fi.Size > 0)) {
		err = e.refuse(client, id, tool, refusal.New(RuleFileOffset, "offset %d is outside %s, which is %d bytes: give 0 to %d", offset, fi.Path, fi.Size, max(fi.Size-1, 0)),
			map[string]any{"path": auditPath(fi.Path), "offset": offset})
		return FileInfo{}, err
	}
	return fi, err
}

// ListFiles lists dir (default: the whole working directory) of a session
// without following links.
func (e *Engine) ListFiles(client, id, dir string) ([]workspace.Entry, bool, error) {
	const tool = "list_files"
	s, f, err := e.sessionFiles(context.Background(), client, id, tool)
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
		return nil, false, e.fileRefusal(client, id, tool, dir, err)
	}
	entries, truncated, err := f.List(clean, maxListEntries)
	if err != nil {
		return nil, false, e.fileRefusal(client, id, tool, dir, err)
	}
	e.sessions.Touch(s)
	return entries, truncated, nil
}

// outputSnapshot stamps the files in a session's output directory before a
// run, so that afterwards only what the run wrote comes back.
func (e *Engine) outputSnapshot(id string) map[string]workspace.Stamp {
	if e.remote == nil && !e.ws.SessionHasDir(id, OutputDir) {
		return nil // no output directory (most sessions): one lstat, no walk
	}
	f, err := e.sessionFS(id)
	if err != nil {
		return nil // no working directory yet: everything after the run is new
	}
	return f.Snapshot(OutputDir, maxOutputListing)
}

// outputFiles returns the files of the output directory that are new or
// changed since before: small ones with their content, within a total;
// and the directory's listing it compared (nil: none taken).
func (e *Engine) outputFiles(id string, before map[string]workspace.Stamp) ([]OutputFile, []string, map[string]workspace.Stamp) {
	if e.remote == nil && !e.ws.SessionHasDir(id, OutputDir) {
		return nil, nil, nil // none before or after the run (or the run removed it)
	}
	f, err := e.sessionFS(id)
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
	inline, budget := e.inlineFileSize(), inlineTotalFactor*e.inlineFileSize()
	var out []OutputFile
	for _, p := range changed {
		of := OutputFile{Path: p, Size: after[p].Size, MIMEType: mimeType(p, nil)}
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
