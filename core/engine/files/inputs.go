package files

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Rules an input file can break, besides the file-* rules (docs/audit.md).
const (
	RuleInputFiles = "input-files"
)

// maxInputFiles bounds the files of one run.
const maxInputFiles = 100

// Inputs checks and reads a stateless run's input files, auditing any
// refusal (the caller returns the error as it is). The total is bounded by
// volumes.session_quota: a run's working directory is no larger.
func (w *Files) Inputs(ctx context.Context, req engine.Request, backendName string) (map[string][]byte, error) {
	if len(req.InputFiles) == 0 {
		return nil, nil
	}
	tool := "execute_" + req.Language
	refuse := func(rule, format string, args ...any) error {
		return w.eng.Refuse(req.Client, req.SessionID, tool, refusal.New(rule, format, args...), map[string]any{"input_files": len(req.InputFiles)})
	}
	switch {
	case req.SessionID != "":
		return nil, refuse(RuleInputFiles, "input_files are for stateless runs (without session_id): put files into session %q with upload_file, where its code finds them", req.SessionID)
	case !w.takesInputFiles(backendName):
		return nil, refuse(RuleInputFiles, "input_files: the %s backend does not take input files; run without them, or in a session (upload_file)", backendName)
	case len(req.InputFiles) > maxInputFiles:
		return nil, refuse(RuleInputFiles, "input_files holds %d files, over the limit of %d per run", len(req.InputFiles), maxInputFiles)
	}
	out := make(map[string][]byte, len(req.InputFiles))
	var total int64
	for i, in := range req.InputFiles {
		where := fmt.Sprintf("input_files[%d]", i)
		clean, err := workspace.CleanPath(in.Path)
		if err != nil {
			return nil, w.fileRefusal(req.Client, req.SessionID, tool, in.Path, fmt.Errorf("%s.path: %w", where, err))
		}
		if _, dup := out[clean]; dup {
			return nil, refuse(RuleInputFiles, "%s.path %s: another input file has the same path", where, refusal.Quoted(clean))
		}
		for other := range out {
			if strings.HasPrefix(clean, other+"/") || strings.HasPrefix(other, clean+"/") {
				return nil, refuse(RuleInputFiles, "%s.path %s: input file %s would have to be both a file and a directory", where, refusal.Quoted(clean), refusal.Quoted(other))
			}
		}
		var data []byte
		sources := 0
		for _, set := range []bool{in.Content != "", in.FromSession != "", in.URL != ""} {
			if set {
				sources++
			}
		}
		switch {
		case sources > 1:
			return nil, refuse(RuleInputFiles, "%s: give one of content (an upload), from_session (a copy of a session's file) or url (fetched by the server), not several", where)
		case in.URL != "":
			if data, err = w.fetchInput(ctx, req, tool, where, in.URL); err != nil {
				return nil, err
			}
		case in.FromSession != "":
			if data, err = w.sessionInput(req.Client, tool, where, in); err != nil {
				return nil, err
			}
		default:
			switch in.Encoding {
			case "", "text":
				data = []byte(in.Content)
			case "base64":
				if data, err = base64.StdEncoding.DecodeString(strings.TrimSpace(in.Content)); err != nil {
					return nil, w.eng.Refuse(req.Client, req.SessionID, tool, refusal.New(RuleFileEncoding, "%s.content of %s is not valid base64 (standard alphabet, with padding): %v", where, refusal.Quoted(clean), err), map[string]any{"path": auditPath(clean)})
				}
			default:
				return nil, w.eng.Refuse(req.Client, req.SessionID, tool, refusal.New(RuleFileEncoding, "%s.encoding %s: use \"text\" or \"base64\"", where, refusal.Quoted(in.Encoding)), nil)
			}
		}
		if max := w.maxFileSize(); int64(len(data)) > max {
			return nil, w.eng.Refuse(req.Client, req.SessionID, tool, refusal.New(RuleFileSize, "%s %s is %d bytes, over the %s limit of one file (volumes.max_file_size)", where, refusal.Quoted(clean), len(data), config.FormatSize(max)), map[string]any{"path": auditPath(clean), "bytes": len(data)})
		}
		total += int64(len(data))
		if q := w.ws.Quota(); q > 0 && total > q {
			return nil, w.eng.Refuse(req.Client, req.SessionID, tool, refusal.New(RuleFileQuota, "input_files take %d bytes up to %s, over the %s a run's working directory holds (volumes.session_quota)", total, where, w.cfg.Volumes.SessionQuota), nil)
		}
		out[clean] = data
	}
	return out, nil
}

// sessionInput reads an input file from one of the caller's sessions: the
// session is looked up by client, so another client's is not found, and the
// read goes through the no-follow workspace (a link is refused).
func (w *Files) sessionInput(client, tool, where string, in engine.InputFile) ([]byte, error) {
	src := in.SourcePath
	if src == "" {
		src = in.Path
	}
	s, f, err := w.sessionFiles(context.Background(), client, in.FromSession, tool)
	if err != nil {
		return nil, err
	}
	clean, err := workspace.CleanPath(src)
	if err == nil {
		var data []byte
		if data, err = f.ReadFile(clean, w.maxFileSize()); err == nil {
			w.eng.Registry().Touch(s)
			return data, nil
		}
	}
	return nil, w.fileRefusal(client, in.FromSession, tool, src, fmt.Errorf("%s (from session %q, source_path %s): %w", where, in.FromSession, refusal.Quoted(src), err))
}

// takesInputFiles reports whether a backend places input files.
func (w *Files) takesInputFiles(name string) bool {
	for _, st := range w.eng.PluginStatuses() {
		if st.Name == name {
			return st.Error == "" && st.Capabilities.InputFiles
		}
	}
	return false
}
