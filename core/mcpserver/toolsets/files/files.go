// Package files is the files toolset: upload_file, download_file and
// list_files on a session's working directory, the file resources (a large
// file in parts), and the files a session run wrote to output/ attached to
// its result.
package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/answer"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	enginefiles "github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Instructions tell an agent how files move in and out of a session.
const Instructions = "upload_file puts a file (text or base64) into a session's working directory, the code's current directory; " +
	"download_file and list_files read it back. Files a session run writes to " + enginefiles.OutputDir + "/ come back with the run: small ones attached, larger ones as links to " + toolsets.FilesTemplate + ".\n"

// parseFileURI splits a file or part URI into the session id, the path
// (not yet checked: the engine refuses "..", links and the rest) and the
// part (-1: the whole file).
func parseFileURI(uri string) (id, rel string, part int, ok bool) {
	rest, ok := strings.CutPrefix(uri, "mcp://forge/sessions/")
	var kind string
	if ok {
		id, rest, ok = strings.Cut(rest, "/")
	}
	if ok {
		kind, rest, ok = strings.Cut(rest, "/")
	}
	part = -1
	switch {
	case !ok:
	case kind == "files":
	case kind == "parts":
		var n string
		var err error
		n, rest, ok = strings.Cut(rest, "/")
		if part, err = strconv.Atoi(n); err != nil || part < 0 || part > maxPart || n != strconv.Itoa(part) {
			ok = false
		}
	default:
		ok = false
	}
	if !ok || id == "" || rest == "" || strings.ContainsAny(rest, "?#") {
		return "", "", 0, false
	}
	if rel, err := url.PathUnescape(rest); err == nil {
		return id, rel, part, true
	}
	return "", "", 0, false
}

// UploadInput is upload_file's input.
type UploadInput struct {
	SessionID string `json:"session_id" jsonschema:"the session whose working directory receives the file (created by an execute_<language> call with this session_id)"`
	Path      string `json:"path" jsonschema:"where to put the file, relative to the session's working directory (the code's current directory), e.g. data/input.csv; parent directories are created"`
	Content   string `json:"content" jsonschema:"the file's content: text as is, or binary data in base64 with encoding base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64"`
}

// FileInput names a file of a session.
type FileInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path" jsonschema:"relative to the session's working directory, e.g. output/result.csv"`
}

// DownloadInput is download_file's input.
type DownloadInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path" jsonschema:"relative to the session's working directory, e.g. output/result.csv"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"the first byte to return (default 0): a file larger than one answer holds comes in parts; call again with next_offset"`
}

// ListInput is list_files's input.
type ListInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path,omitempty" jsonschema:"a directory relative to the session's working directory; default: all of it"`
}

// FileOutput describes a file uploaded or downloaded, or gives the error.
type FileOutput struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path,omitempty" jsonschema:"relative to the session's working directory"`
	Size      int64  `json:"size,omitempty" jsonschema:"bytes"`
	MIMEType  string `json:"mime_type,omitempty"`
	URI       string `json:"uri,omitempty" jsonschema:"the file as a resource, readable with resources/read"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"of content: text (UTF-8) or base64"`
	Content   string `json:"content,omitempty" jsonschema:"the file's content (download_file): all of it, or the part from offset when next_offset is set"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"where content starts in the file (download_file of a part)"`
	Length    int64  `json:"length,omitempty" jsonschema:"bytes of the file in content (download_file)"`
	// NextOffset is where the next part starts; 0: content reaches the end.
	NextOffset int64               `json:"next_offset,omitempty" jsonschema:"more of the file follows: call download_file again with offset next_offset (absent: content reaches the end of the file)"`
	SHA256     string              `json:"sha256,omitempty" jsonschema:"of the whole file (download_file): parts read while the file changed do not add up to it"`
	Error      *toolsets.ErrorInfo `json:"error,omitempty"`
}

// ListOutput lists a session's files.
type ListOutput struct {
	SessionID string              `json:"session_id"`
	Files     []workspace.Entry   `json:"files,omitempty" jsonschema:"sorted by path; links are listed, never followed"`
	Truncated bool                `json:"truncated,omitempty" jsonschema:"more entries exist than were listed"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

// OutputFileRef is a file a session run wrote to its output directory.
type OutputFileRef struct {
	Path     string `json:"path" jsonschema:"relative to the session's working directory"`
	Size     int64  `json:"size" jsonschema:"bytes"`
	MIMEType string `json:"mime_type"`
	URI      string `json:"uri" jsonschema:"readable with resources/read"`
	Inline   bool   `json:"inline,omitempty" jsonschema:"its content is attached as an embedded resource; otherwise a resource link is"`
}

// Files is what the file tools and the file resource need.
type Files interface {
	UploadFile(client, id, rel, content, encoding string) (enginefiles.FileInfo, error)
	ReadFile(client, id, rel, tool string) (enginefiles.FileInfo, error)
	ReadFileFrom(client, id, rel, tool string, offset int64) (enginefiles.FileInfo, error)
	ListFiles(client, id, dir string) ([]workspace.Entry, bool, error)
	MaxFileSize() int64
	InlineFileSize() int64
}

type tools struct {
	env toolsets.Env
	f   Files
}

func size(n int64) string { return config.FormatSize(n) }

// Toolset is the file tools and resources.
func Toolset(env toolsets.Env, f Files) toolsets.Toolset {
	t := tools{env, f}
	return toolsets.Toolset{Name: "files",
		Tools: append([]toolsets.Tool{Upload(env, f), Download(env, f), List(env, f)}, hostTools(env, f)...),
		Templates: []toolsets.Template{{Def: &mcp.ResourceTemplate{
			Name: "session-file", Title: "Session file", URITemplate: toolsets.FilesTemplate,
			Description: fmt.Sprintf("A file of a session's working directory (path relative to it, segments percent-encoded), at most %s; one over %s is read in parts (%s)",
				size(f.MaxFileSize()), size(t.partSize()), toolsets.FilePartsTemplate),
		}, Handler: t.fileResource}, {Def: &mcp.ResourceTemplate{
			Name: "session-file-part", Title: "Part of a session file", URITemplate: toolsets.FilePartsTemplate,
			Description: fmt.Sprintf("Part {part} (from 0) of a file of a session's working directory: its bytes from part × %s, at most %s (what one answer holds, server.max_message)",
				size(t.partSize()), size(t.partSize())),
		}, Handler: t.fileResource}}}
}

// hostTools are the host-root tools when f serves them.
func hostTools(env toolsets.Env, f Files) []toolsets.Tool {
	h, _ := f.(HostFiles)
	return HostTools(env, h)
}

// Upload is upload_file.
func Upload(env toolsets.Env, f Files) toolsets.Tool {
	t := tools{env, f}
	return toolsets.New(&mcp.Tool{
		Name: "upload_file", Title: "Put a file into a session",
		Description: fmt.Sprintf("Write a file into a session's working directory, where the session's code opens it by its relative path "+
			"(pandas.read_csv(\"data/input.csv\"), read.csv(\"data/input.csv\")). Content is text, or base64 with encoding base64; "+
			"at most %s per file, within the session's quota of %s. Paths are relative: absolute paths, '..' and symbolic links are refused. "+
			"An existing file is replaced. The session must exist (run code in it first). On error the result has session_id and error {type, message}.",
			size(f.MaxFileSize()), env.Cfg.Volumes.SessionQuota),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in UploadInput) (*mcp.CallToolResult, FileOutput, error) {
		fi, err := t.f.UploadFile(t.env.Conn(req.Session), in.SessionID, in.Path, in.Content, in.Encoding)
		if err != nil {
			res, info := toolsets.Failure(err)
			return res, FileOutput{SessionID: in.SessionID, Path: in.Path, Error: info}, nil
		}
		out := FileOutput{SessionID: in.SessionID, Path: fi.Path, Size: fi.Size, MIMEType: fi.MIMEType, URI: toolsets.FileURI(in.SessionID, fi.Path)}
		return toolcall.Text(fmt.Sprintf("Wrote %s (%d bytes) in session %s.", fi.Path, fi.Size, in.SessionID)), out, nil
	})
}

// Download is download_file.
func Download(env toolsets.Env, f Files) toolsets.Tool {
	t := tools{env, f}
	return toolsets.New(&mcp.Tool{
		Name: "download_file", Title: "Get a file from a session",
		Description: fmt.Sprintf("Read a file from a session's working directory, byte for byte: content is text when it is UTF-8 (and no larger escaped than in base64), "+
			"base64 otherwise (see encoding); also attached as an embedded resource up to %s, above that as a resource link. At most %s; symbolic links, directories, devices and pipes are refused. "+
			"A file over %s (what one answer holds, server.max_message) comes in parts: content holds the part from offset, next_offset says where the next starts "+
			"(call again with offset), sha256 is the whole file's; its parts are also resources %s. "+
			"On error the result has session_id and error {type, message}.", size(f.InlineFileSize()), size(f.MaxFileSize()), size(t.partSize()), toolsets.FilePartsTemplate),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in DownloadInput) (*mcp.CallToolResult, FileOutput, error) {
		fi, err := t.f.ReadFileFrom(t.env.Conn(req.Session), in.SessionID, in.Path, "download_file", in.Offset)
		if err != nil {
			res, info := toolsets.Failure(err)
			return res, FileOutput{SessionID: in.SessionID, Path: in.Path, Error: info}, nil
		}
		uri := toolsets.FileURI(in.SessionID, fi.Path)
		sum := sha256.Sum256(fi.Data)
		out := FileOutput{SessionID: in.SessionID, Path: fi.Path, Size: fi.Size, MIMEType: fi.MIMEType, URI: uri, Offset: in.Offset, SHA256: hex.EncodeToString(sum[:])}
		part := fi.Data[in.Offset:min(in.Offset+t.partSize(), fi.Size)]
		out.Length = int64(len(part))
		if end := in.Offset + out.Length; end < fi.Size {
			out.NextOffset = end
		}
		rc := t.contents(uri, fi.MIMEType, part)
		if rc.Blob != nil {
			out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(part)
		} else {
			out.Encoding, out.Content = "text", rc.Text
		}
		text := fmt.Sprintf("%s (%d bytes, %s) from session %s.", fi.Path, fi.Size, fi.MIMEType, in.SessionID)
		if out.NextOffset > 0 || in.Offset > 0 {
			text = fmt.Sprintf("%s: bytes %d to %d of %d (%s) from session %s.", fi.Path, in.Offset, in.Offset+out.Length, fi.Size, fi.MIMEType, in.SessionID)
			if out.NextOffset > 0 {
				text += fmt.Sprintf(" More follows: call download_file with offset %d.", out.NextOffset)
			}
		}
		// The content travels once in full (structured content) unless the
		// file is small: a second copy doubled the message past what
		// clients accept, so above the inline size the content list
		// carries links to the same bytes.
		result := toolcall.Text(text)
		switch {
		case fi.Size <= t.f.InlineFileSize():
			result.Content = append(result.Content, &mcp.EmbeddedResource{Resource: rc})
		case fi.Size <= t.partSize():
			size := fi.Size
			result.Content = append(result.Content, &mcp.ResourceLink{URI: uri, Name: fi.Path, MIMEType: fi.MIMEType, Size: &size})
		default:
			result.Content = append(result.Content, t.partLinks(in.SessionID, fi.Path, fi.MIMEType, fi.Size)...)
		}
		return result, out, nil
	})
}

// List is list_files.
func List(env toolsets.Env, f Files) toolsets.Tool {
	t := tools{env, f}
	return toolsets.New(&mcp.Tool{
		Name: "list_files", Title: "List a session's files",
		Description: "List the files and directories of a session's working directory (or of one directory in it) with type, size and " +
			"modification time; symbolic links are listed as such and never followed. Files a run writes to " + enginefiles.OutputDir + "/ come back with that run.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListOutput, error) {
		entries, truncated, err := t.f.ListFiles(t.env.Conn(req.Session), in.SessionID, in.Path)
		if err != nil {
			res, info := toolsets.Failure(err)
			return res, ListOutput{SessionID: in.SessionID, Error: info}, nil
		}
		text := listing(fmt.Sprintf("%d entries in session %s.", len(entries), in.SessionID), entries, truncated)
		return toolcall.Text(text), ListOutput{SessionID: in.SessionID, Files: entries, Truncated: truncated}, nil
	})
}

// listing is a directory listing as text: one line per entry after head.
func listing(head string, entries []workspace.Entry, truncated bool) string {
	var b strings.Builder
	b.WriteString(head + "\n")
	for _, e := range entries {
		// A name is the code's (or the user's) to choose: quoted when it
		// holds what could pass for another line (a newline, a control byte).
		if e.Type == "file" {
			fmt.Fprintf(&b, "- %s (%d bytes)\n", displayName(e.Path), e.Size)
		} else {
			fmt.Fprintf(&b, "- %s (%s)\n", displayName(e.Path), e.Type)
		}
	}
	if truncated {
		b.WriteString("(more entries were left out: list a subdirectory)\n")
	}
	return b.String()
}

// contents is a file (or a part of one) as resource contents: text when
// it is UTF-8 without NUL bytes and its JSON text is no larger than base64
// would be or fits a part anyway (control bytes take six bytes each once
// escaped), else a blob.
func (t tools) contents(uri, mimeType string, data []byte) *mcp.ResourceContents {
	rc := &mcp.ResourceContents{URI: uri, MIMEType: mimeType}
	switch {
	case len(data) == 0:
		rc.Blob = []byte{} // an empty text would be omitted on the wire
	case utf8.Valid(data) && !bytes.ContainsRune(data, 0) && t.textFits(data):
		rc.Text = string(data)
	default:
		rc.Blob = data
	}
	return rc
}

func (t tools) textFits(data []byte) bool {
	n := sanitize.JSONLen(string(data))
	return n <= base64.StdEncoding.EncodedLen(len(data)) || int64(n) <= t.partSize()*4/3
}

func (t tools) partSize() int64 { return PartSize(t.env.Cfg) }

// PartSize is how many bytes of a file one answer carries: its base64 and
// the answer's own fields within server.max_message.
func PartSize(cfg config.Config) int64 {
	n := (int64(cfg.Server.MaxMessage) - answer.Envelope - 16<<10) * 3 / 4
	if n >= 2<<20 {
		return n &^ (1<<20 - 1) // whole MiB: parts an agent can count
	}
	return max(n&^(64<<10-1), 64<<10)
}

// maxPart bounds a part number in a URI: files are at most
// volumes.max_file_size, parts at least 64 KiB.
const maxPart = 1 << 20

// maxPartLinks bounds the part links one answer lists (download_file's
// next_offset reaches every part anyway).
const maxPartLinks = 32

func (t tools) partLinks(id, rel, mimeType string, total int64) []mcp.Content {
	var out []mcp.Content
	p := t.partSize()
	for i := int64(0); i*p < total && i < maxPartLinks; i++ {
		n := min(p, total-i*p)
		out = append(out, &mcp.ResourceLink{URI: toolsets.FilePartURI(id, rel, int(i)), Name: fmt.Sprintf("%s (part %d)", rel, i), MIMEType: mimeType, Size: &n})
	}
	return out
}

// displayName is a path as a text listing shows it: as is, or quoted (Go
// syntax) when it holds a control character, a quote, a backslash or
// invalid UTF-8, so that no name prints as a line of its own.
func displayName(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == utf8.RuneError || r == '\u2028' || r == '\u2029' {
			return strconv.Quote(p)
		}
	}
	return p
}

func (t tools) fileResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, rel, part, ok := parseFileURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	fi, err := t.f.ReadFile(t.env.Conn(req.Session), id, rel, "resources/read")
	var re *refusal.Error
	if errors.As(err, &re) {
		switch re.Rule {
		case session.RuleSessionID, session.RuleSessionNotFound, enginefiles.RuleFileNotFound:
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, errors.New(re.Msg) // a refused path: say why
	}
	if err != nil {
		return nil, err
	}
	p := t.partSize()
	data := fi.Data
	switch {
	case part >= 0:
		// Compared as a count, never multiplied first: part × p of a
		// hostile part number wraps (to a negative slice bound that
		// panicked, or to 0 that served part 0).
		if n := max((fi.Size+p-1)/p, 1); int64(part) >= n {
			return nil, fmt.Errorf("%s has %d part(s) of at most %s (it is %d bytes): part %d does not exist", fi.Path, n, config.FormatSize(p), fi.Size, part)
		}
		data = data[int64(part)*p : min(int64(part+1)*p, fi.Size)]
	case fi.Size > p:
		n := (fi.Size + p - 1) / p
		return nil, fmt.Errorf("%s is %d bytes, more than one answer holds (%s, server.max_message): read its %d parts, %s to %s, or download_file with offset",
			fi.Path, fi.Size, config.FormatSize(p), n, toolsets.FilePartURI(id, fi.Path, 0), toolsets.FilePartURI(id, fi.Path, int(n-1)))
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{t.contents(uri, fi.MIMEType, data)}}, nil
}

// Attach attaches to result what a session run wrote to its output
// directory: small files as embedded resources, larger ones as links; the
// files as the run's output lists them.
func Attach(cfg config.Config, result *mcp.CallToolResult, id string, files []engine.OutputFile) (refs []OutputFileRef) {
	if len(files) == 0 {
		return nil
	}
	t := tools{env: toolsets.Env{Cfg: cfg}}
	var lines []string
	for _, f := range files {
		uri := toolsets.FileURI(id, f.Path)
		ref := OutputFileRef{Path: f.Path, Size: f.Size, MIMEType: f.MIMEType, URI: uri, Inline: f.Data != nil}
		refs = append(refs, ref)
		if f.Data != nil {
			result.Content = append(result.Content, &mcp.EmbeddedResource{Resource: t.contents(uri, f.MIMEType, f.Data)})
			lines = append(lines, fmt.Sprintf("- %s (%d bytes, %s), attached", f.Path, f.Size, f.MIMEType))
		} else {
			size := f.Size
			result.Content = append(result.Content, &mcp.ResourceLink{URI: uri, Name: f.Path, MIMEType: f.MIMEType, Size: &size})
			lines = append(lines, fmt.Sprintf("- %s (%d bytes, %s): read %s", f.Path, f.Size, f.MIMEType, uri))
		}
	}
	if len(result.Content) > 0 {
		if tc, ok := result.Content[0].(*mcp.TextContent); ok {
			tc.Text += fmt.Sprintf("\n%d file(s) written to %s/:\n%s\n", len(files), enginefiles.OutputDir, strings.Join(lines, "\n"))
		}
	}
	return refs
}
