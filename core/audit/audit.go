// Package audit writes the JSON-lines audit log: every container operation and
// every policy decision. It never records code (only its sha256), environment
// names or values, secrets or file contents. A log that cannot be written is
// reported (Write, Check) so that the core can refuse to run code unaudited.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Event names.
const (
	ContainerCreate   = "container.create"
	ContainerStart    = "container.start"
	ContainerStop     = "container.stop"
	ContainerRemove   = "container.remove"
	ContainerExec     = "container.exec"
	ContainerSignal   = "container.signal"
	ContainerClamp    = "container.clamp"    // a warm-up container held to its limits
	ContainerSnapshot = "container.snapshot" // a gVisor sandbox saved whole (memory and all)
	ContainerAdopt    = "container.adopt"    // a session's container taken over from another core
	ContainerRelease  = "container.release"  // a session's container handed over to another core
	WorkspaceWrite    = "workspace.write"
	ChannelOpen       = "channel.open"
	ContainerReap     = "container.reconcile"
	ExecutionRequest  = "execution.request"
	ExecutionComplete = "execution.complete"
	SecurityViolation = "security.violation"
	BuildRequest      = "build.request"
	BuildComplete     = "build.complete"
	SessionCreate     = "session.create"
	SessionDestroy    = "session.destroy"
	SessionAdopt      = "session.adopt"    // a session another core opened, served here from now on
	SessionHandover   = "session.handover" // a session left for another core (a graceful stop)
	SessionForward    = "session.forward"  // a call of a session another replica serves, sent to it
	PluginLoad        = "plugin.load"
	PluginEvent       = "plugin.event"
	WatchdogEvent     = "watchdog.cleanup"
)

// Severity levels.
const (
	Info     = "info"
	Warning  = "warning"
	Error    = "error"
	Critical = "critical"
)

// Entry is one line of the log.
type Entry struct {
	Timestamp string         `json:"timestamp"`
	Event     string         `json:"event"`
	Severity  string         `json:"severity"`
	SessionID string         `json:"session_id,omitempty"`
	UserID    string         `json:"user_id,omitempty"`
	Success   bool           `json:"success"`
	Details   map[string]any `json:"details,omitempty"`
	Error     string         `json:"error,omitempty"`
}

// Recorder is what the rest of the core depends on; *Logger implements it.
type Recorder interface {
	Record(e Entry)
}

// Writer is a Recorder that can say whether an entry reached the log, for
// callers that must not act unaudited.
type Writer interface {
	Recorder
	// Write records e and returns why it could not be written.
	Write(e Entry) error
	// Check reports whether the log can be written now, without writing.
	Check() error
}

// Must records e and returns an error if rec knows it was not written.
func Must(rec Recorder, e Entry) error {
	if w, ok := rec.(Writer); ok {
		return w.Write(e)
	}
	rec.Record(e)
	return nil
}

// Check reports whether rec can be written, if rec can tell.
func Check(rec Recorder) error {
	if w, ok := rec.(Writer); ok {
		return w.Check()
	}
	return nil
}

// Modes of the log and its directory: the log names sessions, images and
// outcomes, which other local users have no business reading.
const (
	FileMode os.FileMode = 0o600
	DirMode  os.FileMode = 0o700
)

// Logger appends entries to a file, rotated by size with lumberjack.
//
// Around each write it checks that the path still names the file it writes:
// a log that was deleted, moved or replaced is reopened (so that no line goes
// into an unlinked file), and a path that is no longer a regular file is an
// error rather than something to move aside.
type Logger struct {
	mu      sync.Mutex
	path    string
	keep    int
	lj      *lumberjack.Logger
	ino     uint64 // inode the path named after the last write
	partial bool   // the last write was cut short: start the next on a new line
	err     error  // the last write's failure, nil once a write succeeds
	closed  bool
	now     func() time.Time
	onError func(error)
	hooks   atomic.Pointer[[]func(*Entry)]
	mirror  io.Writer // every line written to the file, copied (security.audit_stdout)
}

// Mirror copies every line to w as well (the process's stdout in a
// cluster, where log collection picks it up), also when the file could not
// take it. A failed copy is reported, never a failed entry. Call it before
// the Logger is shared.
func (l *Logger) Mirror(w io.Writer) { l.mirror = w }

// AddHook runs fn on every entry before it is written, after redaction: it
// may add what the caller's layer knows (the tenant of a container) and
// observe the stream (metrics). Hooks run on the recording goroutine.
//
// HOOK(http): used by core/httpserver for tenant attribution and metrics.
func (l *Logger) AddHook(fn func(*Entry)) {
	for {
		old := l.hooks.Load()
		var next []func(*Entry)
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, fn)
		if l.hooks.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Open creates the directory (0700) and file (0600) if needed, tightens an
// existing file's mode to 0600, and checks that the file can be appended to.
// maxSize is in bytes, rounded up to whole megabytes (0: never rotate); keep
// is how many rotated files are kept.
func Open(path string, maxSize int64, keep int) (*Logger, error) {
	if err := os.MkdirAll(filepath.Dir(path), DirMode); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	const mb = 1 << 20
	size := int((maxSize + mb - 1) / mb)
	if maxSize <= 0 {
		size = 1 << 30 // a petabyte: never
	}
	backups := keep
	if keep <= 0 {
		backups = 1 // lumberjack keeps every file for 0; we delete the one kept
	}
	l := &Logger{path: path, keep: keep, now: time.Now, onError: func(error) {},
		lj: &lumberjack.Logger{Filename: path, MaxSize: size, MaxBackups: backups}}
	if _, err := l.prepare(); err != nil {
		return nil, err
	}
	if err := probe(path); err != nil {
		return nil, err
	}
	return l, nil
}

// OnError sets where write failures are reported (the core's logger).
func (l *Logger) OnError(fn func(error)) { l.onError = fn }

// Path is the current log file.
func (l *Logger) Path() string { return l.path }

// prepare makes sure the path names a regular file, creating it (0600) and
// its directory (0700) when missing, and drops lumberjack's handle when the
// file it holds is no longer the one at the path. It returns the file's size.
// Called with mu held (or before the Logger is shared).
func (l *Logger) prepare() (int64, error) {
	st, err := os.Lstat(l.path)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(l.path), DirMode); err != nil {
			return 0, fmt.Errorf("audit log directory: %w", err)
		}
		// Created here rather than by lumberjack, which would open a new file
		// without O_APPEND and let two servers sharing the log overwrite
		// each other's lines.
		f, cerr := os.OpenFile(l.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, FileMode)
		if cerr != nil && !errors.Is(cerr, os.ErrExist) {
			return 0, fmt.Errorf("create audit log: %w", cerr)
		}
		if f != nil {
			f.Close()
		}
		st, err = os.Lstat(l.path)
	}
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("audit log %s is not a regular file (%s)", l.path, kind(st.Mode()))
	}
	if st.Mode().Perm()&^FileMode != 0 {
		if err := os.Chmod(l.path, FileMode); err != nil {
			return 0, fmt.Errorf("audit log %s has mode %v and cannot be made 0600: %w", l.path, st.Mode().Perm(), err)
		}
	}
	if ino := inode(st); ino != l.ino {
		_ = l.lj.Close() // reopened, with O_APPEND, on the next write
		l.ino = ino
	}
	return st.Size(), nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

// probe opens the file for appending and closes it.
func probe(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("audit log cannot be written: %w", err)
	}
	return f.Close()
}

// Record writes one entry, filling the timestamp and redacting details. A
// failure goes to the OnError function and is kept for Err.
func (l *Logger) Record(e Entry) { _ = l.Write(e) }

// Write writes one entry and returns why it could not be written.
func (l *Logger) Write(e Entry) error {
	e.Timestamp = l.now().UTC().Format(time.RFC3339Nano)
	if e.Severity == "" {
		e.Severity = Info
	}
	e.Details = Redact(e.Details)
	if hs := l.hooks.Load(); hs != nil {
		for _, h := range *hs {
			h(&e)
		}
	}
	line, err := json.Marshal(e)
	if err != nil {
		err = fmt.Errorf("audit: encode %s: %w", e.Event, err)
		l.onError(err)
		return err
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	// The copy goes out whether the file took the line or not: where the
	// file is a pod's scratch space, the copy is what the cluster keeps.
	if l.mirror != nil && !l.closed {
		if _, err := l.mirror.Write(line); err != nil {
			l.onError(fmt.Errorf("copy audit line to standard output: %w", err))
		}
	}
	if err := l.write(line); err != nil {
		l.err = err
		l.onError(err)
		return err
	}
	l.err = nil
	return nil
}

func (l *Logger) write(line []byte) error {
	if l.closed {
		return errors.New("audit log is closed")
	}
	size, err := l.prepare()
	if err != nil {
		return err
	}
	if l.partial {
		line = append([]byte{'\n'}, line...)
	}
	n, err := l.lj.Write(line)
	if err != nil {
		if n > 0 {
			// Cut the fragment off (a full disk) so that the file stays whole
			// JSON lines; failing that, start the next line on a new one.
			_ = l.lj.Close()
			if os.Truncate(l.path, size) != nil {
				l.partial = true
			}
		}
		return fmt.Errorf("write audit log: %w", err)
	}
	l.partial = false
	// lumberjack may have rotated: its new file was opened without O_APPEND,
	// so let it reopen the file in append mode, and apply audit_keep = 0.
	if st, err := os.Lstat(l.path); err == nil && inode(st) != l.ino {
		_ = l.lj.Close()
		l.ino = inode(st)
		if l.keep <= 0 {
			l.removeBackups()
		}
	}
	return nil
}

// removeBackups deletes every rotated file (audit_keep = 0).
func (l *Logger) removeBackups() {
	for _, p := range l.Backups() {
		os.Remove(p)
	}
}

// Backups lists rotated files, oldest first (lumberjack names them
// <name>-<UTC time><ext>).
func (l *Logger) Backups() []string {
	dir, base := filepath.Split(l.path)
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	matches, _ := filepath.Glob(filepath.Join(dir, glob(prefix)+"*"+glob(ext)))
	sort.Strings(matches)
	return matches
}

func glob(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}

// Err is the last write's failure, or nil if it succeeded.
func (l *Logger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Check reports whether a line could be written now: the path is (or can be
// made) a regular file that opens for appending. A full filesystem shows only
// on a write.
func (l *Logger) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("audit log is closed")
	}
	if _, err := l.prepare(); err != nil {
		return err
	}
	return probe(l.path)
}

// Close closes the file; later writes fail.
func (l *Logger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.lj.Close()
}

// HashCode is how code appears in the log.
func HashCode(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

var (
	contentKey = regexp.MustCompile(`(?i)^(code|source|script|content|contents|file_content|stdin|body)$`)
	// Environment names can carry secrets as well as values (a token pasted
	// as a name), so only how many there were is kept.
	envKey = regexp.MustCompile(`(?i)^(env|envs|environ|environment|env_names|env_vars|environment_names|environment_variables)$`)
)

// What Redact does with a key, in the order its rules apply.
type keyClass uint8

const (
	keyPlain keyClass = iota
	keyEnv
	keySecret
	keyContent
)

// maxClassified bounds the classification cache: the keys of details are
// the core's and the plugins' own names, a few dozen in all, but a plugin
// could send arbitrary ones, and those must not grow the server's memory.
const maxClassified = 4096

var (
	classified  sync.Map // key → keyClass
	nClassified atomic.Int64
)

// classify applies the key rules of Redact. The case-insensitive regular
// expressions cost microseconds per key, and every execute records a few
// entries of about ten keys each, always the same ones: each key's class
// is computed once and kept (up to maxClassified keys; beyond that it is
// computed every time, with the same result).
func classify(k string) keyClass {
	if c, ok := classified.Load(k); ok {
		return c.(keyClass)
	}
	c := keyPlain
	switch {
	case envKey.MatchString(k):
		c = keyEnv
	case config.IsSecretKey(k):
		c = keySecret
	case contentKey.MatchString(k):
		c = keyContent
	}
	if nClassified.Load() < maxClassified {
		if _, loaded := classified.LoadOrStore(strings.Clone(k), c); !loaded {
			nClassified.Add(1)
		}
	}
	return c
}

// Redact returns a copy of details with secret-looking keys masked, code or
// file contents replaced by their sha256 and environments by their size, at
// any depth.
func Redact(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	out := make(map[string]any, len(d))
	for k, v := range d {
		switch classify(k) {
		case keyEnv:
			out["env_count"] = count(v)
		case keySecret:
			out[k] = "[redacted]"
		case keyContent:
			if s, ok := v.(string); ok {
				out[k+"_sha256"] = HashCode(s)
			} else {
				out[k] = "[redacted]"
			}
		default:
			out[k] = redactValue(v)
		}
	}
	return out
}

func count(v any) int {
	switch x := v.(type) {
	case map[string]string:
		return len(x)
	case map[string]any:
		return len(x)
	case []string:
		return len(x)
	case []any:
		return len(x)
	case nil:
		return 0
	}
	return 1
}

func redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return Redact(x)
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return Redact(m)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redactValue(e)
		}
		return out
	}
	return v
}

// ErrText is err's message, or "" for nil: the Entry.Error of an outcome.
func ErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ErrSeverity is the Entry.Severity of an outcome: Error for a failure,
// else Info.
func ErrSeverity(err error) string {
	if err != nil {
		return Error
	}
	return Info
}

// Discard is a Recorder that drops everything, for tests of other packages.
type Discard struct{}

// Record drops e.
func (Discard) Record(Entry) {}
