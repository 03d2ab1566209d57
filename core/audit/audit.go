// Package audit writes the JSON-lines audit log: every container operation and
// every policy decision. It never records code (only its sha256), secrets or
// file contents.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/mcp-forge/mcp-forge/core/config"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

// Event names.
const (
	ContainerCreate   = "container.create"
	ContainerStart    = "container.start"
	ContainerStop     = "container.stop"
	ContainerRemove   = "container.remove"
	ContainerExec     = "container.exec"
	ContainerSignal   = "container.signal"
	ContainerReap     = "container.reconcile"
	ExecutionRequest  = "execution.request"
	ExecutionComplete = "execution.complete"
	SecurityViolation = "security.violation"
	BuildRequest      = "build.request"
	BuildComplete     = "build.complete"
	SessionCreate     = "session.create"
	SessionDestroy    = "session.destroy"
	PluginLoad        = "plugin.load"
	PluginEvent       = "plugin.event"
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

// Logger appends entries to a file, rotating it by size.
type Logger struct {
	mu      sync.Mutex
	path    string
	maxSize int64
	keep    int
	f       *os.File
	size    int64
	now     func() time.Time
	onError func(error)
	hooks   atomic.Pointer[[]func(*Entry)]
}

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

// Open creates the directory (0700) and file (0600) if needed.
func Open(path string, maxSize int64, keep int) (*Logger, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	l := &Logger{path: path, maxSize: maxSize, keep: keep, now: time.Now, onError: func(error) {}}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// OnError sets where write failures are reported (the core's logger).
func (l *Logger) OnError(fn func(error)) { l.onError = fn }

func (l *Logger) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat audit log: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Path is the current log file.
func (l *Logger) Path() string { return l.path }

// Record writes one entry, filling the timestamp and redacting details.
func (l *Logger) Record(e Entry) {
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
		l.onError(fmt.Errorf("audit: encode %s: %w", e.Event, err))
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	if l.maxSize > 0 && l.size+int64(len(line)) > l.maxSize && l.size > 0 {
		if err := l.rotate(); err != nil {
			l.onError(err)
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.onError(fmt.Errorf("audit: write: %w", err))
	}
}

// rotate shifts audit.log → audit.log.1 → … → audit.log.<keep>.
func (l *Logger) rotate() error {
	l.f.Close()
	l.f = nil
	if l.keep <= 0 {
		os.Remove(l.path)
	} else {
		os.Remove(fmt.Sprintf("%s.%d", l.path, l.keep))
		for i := l.keep - 1; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1))
		}
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return fmt.Errorf("audit: rotate: %w", err)
		}
	}
	return l.open()
}

// Close flushes and closes the file.
func (l *Logger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// HashCode is how code appears in the log.
func HashCode(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

var contentKey = regexp.MustCompile(`(?i)^(code|source|script|content|contents|file_content|stdin|body)$`)

// Redact returns a copy of details with secret-looking keys masked and code
// or file contents replaced by their sha256, at any depth.
func Redact(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	out := make(map[string]any, len(d))
	for k, v := range d {
		switch {
		case config.IsSecretKey(k):
			out[k] = "[redacted]"
		case contentKey.MatchString(k):
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

// Discard is a Recorder that drops everything, for tests of other packages.
type Discard struct{}

// Record drops e.
func (Discard) Record(Entry) {}
