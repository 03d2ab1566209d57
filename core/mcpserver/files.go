package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// FilesTemplate reads a file of a session's working directory. {+path} is
// a reserved expansion: the path keeps its slashes
// (mcp://forge/sessions/s1/files/output/result.csv); each segment is
// percent-encoded.
const FilesTemplate = "mcp://forge/sessions/{id}/files/{+path}"

// fileInstructions tell an agent how files move in and out of a session.
const fileInstructions = "upload_file puts a file (text or base64) into a session's working directory, the code's current directory; " +
	"download_file and list_files read it back. Files a session run writes to " + engine.OutputDir + "/ come back with the run: small ones attached, larger ones as links to " + FilesTemplate + ".\n"

// FileURI is the resource URI of a session's file.
func FileURI(id, rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "mcp://forge/sessions/" + id + "/files/" + strings.Join(parts, "/")
}

// parseFileURI splits a file URI into the session id and the path (not yet
// checked: the engine refuses "..", links and the rest).
func parseFileURI(uri string) (id, rel string, ok bool) {
	rest, ok := strings.CutPrefix(uri, "mcp://forge/sessions/")
	if !ok {
		return "", "", false
	}
	id, rest, ok = strings.Cut(rest, "/files/")
	if !ok || id == "" || rest == "" || strings.ContainsAny(rest, "?#") {
		return "", "", false
	}
	rel, err := url.PathUnescape(rest)
	if err != nil {
		return "", "", false
	}
	return id, rel, true
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

// ListInput is list_files's input.
type ListInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path,omitempty" jsonschema:"a directory relative to the session's working directory; default: all of it"`
}

// FileOutput describes a file uploaded or downloaded, or gives the error.
type FileOutput struct {
	SessionID string     `json:"session_id"`
	Path      string     `json:"path,omitempty" jsonschema:"relative to the session's working directory"`
	Size      int64      `json:"size,omitempty" jsonschema:"bytes"`
	MIMEType  string     `json:"mime_type,omitempty"`
	URI       string     `json:"uri,omitempty" jsonschema:"the file as a resource, readable with resources/read"`
	Encoding  string     `json:"encoding,omitempty" jsonschema:"of content: text (UTF-8) or base64"`
	Content   string     `json:"content,omitempty" jsonschema:"the file's content (download_file)"`
	Error     *ErrorInfo `json:"error,omitempty"`
}

// ListOutput lists a session's files.
type ListOutput struct {
	SessionID string            `json:"session_id"`
	Files     []workspace.Entry `json:"files,omitempty" jsonschema:"sorted by path; links are listed, never followed"`
	Truncated bool              `json:"truncated,omitempty" jsonschema:"more entries exist than were listed"`
	Error     *ErrorInfo        `json:"error,omitempty"`
}

// OutputFileRef is a file a session run wrote to its output directory.
type OutputFileRef struct {
	Path     string `json:"path" jsonschema:"relative to the session's working directory"`
	Size     int64  `json:"size" jsonschema:"bytes"`
	MIMEType string `json:"mime_type"`
	URI      string `json:"uri" jsonschema:"readable with resources/read"`
	Inline   bool   `json:"inline,omitempty" jsonschema:"its content is attached as an embedded resource; otherwise a resource link is"`
}

func (s *Server) addFileTools() {
	size := func(n int64) string { return config.FormatSize(n) }
	addTool(s.mcp, &mcp.Tool{
		Name: "upload_file", Title: "Put a file into a session",
		Description: fmt.Sprintf("Write a file into a session's working directory, where the session's code opens it by its relative path "+
			"(pandas.read_csv(\"data/input.csv\"), read.csv(\"data/input.csv\")). Content is text, or base64 with encoding base64; "+
			"at most %s per file, within the session's quota of %s. Paths are relative: absolute paths, '..' and symbolic links are refused. "+
			"An existing file is replaced. The session must exist (run code in it first). On error the result has session_id and error {type, message}.",
			size(s.files.MaxFileSize()), s.cfg.Volumes.SessionQuota),
		InputSchema: schemaFor[UploadInput](), OutputSchema: schemaFor[FileOutput](),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in UploadInput) (*mcp.CallToolResult, FileOutput, error) {
		fi, err := s.files.UploadFile(s.conn(req.Session), in.SessionID, in.Path, in.Content, in.Encoding)
		if err != nil {
			res, info := failure(err)
			return res, FileOutput{SessionID: in.SessionID, Path: in.Path, Error: info}, nil
		}
		out := FileOutput{SessionID: in.SessionID, Path: fi.Path, Size: fi.Size, MIMEType: fi.MIMEType, URI: FileURI(in.SessionID, fi.Path)}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("Wrote %s (%d bytes) in session %s.", fi.Path, fi.Size, in.SessionID)}}}, out, nil
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "download_file", Title: "Get a file from a session",
		Description: fmt.Sprintf("Read a file from a session's working directory, byte for byte: content is text when the file is UTF-8, "+
			"base64 otherwise (see encoding); also attached as an embedded resource up to %s, above that as a resource link. At most %s; symbolic links, directories, devices and pipes are refused. "+
			"On error the result has session_id and error {type, message}.", size(s.files.InlineFileSize()), size(s.files.MaxFileSize())),
		InputSchema: schemaFor[FileInput](), OutputSchema: schemaFor[FileOutput](),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in FileInput) (*mcp.CallToolResult, FileOutput, error) {
		fi, err := s.files.ReadFile(s.conn(req.Session), in.SessionID, in.Path, "download_file")
		if err != nil {
			res, info := failure(err)
			return res, FileOutput{SessionID: in.SessionID, Path: in.Path, Error: info}, nil
		}
		uri := FileURI(in.SessionID, fi.Path)
		out := FileOutput{SessionID: in.SessionID, Path: fi.Path, Size: fi.Size, MIMEType: fi.MIMEType, URI: uri}
		rc := contents(uri, fi.MIMEType, fi.Data)
		if rc.Blob != nil {
			out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(fi.Data)
		} else {
			out.Encoding, out.Content = "text", rc.Text
		}
		// The content travels once in full (structured content): a second
		// copy of a large file would double the message past the 16 MiB a
		// stdio frame may hold, so above the inline size the content list
		// carries a link to the same bytes.
		result := &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: fmt.Sprintf("%s (%d bytes, %s) from session %s.", fi.Path, fi.Size, fi.MIMEType, in.SessionID)}}}
		if fi.Size <= s.files.InlineFileSize() {
			result.Content = append(result.Content, &mcp.EmbeddedResource{Resource: rc})
		} else {
			size := fi.Size
			result.Content = append(result.Content, &mcp.ResourceLink{URI: uri, Name: fi.Path, MIMEType: fi.MIMEType, Size: &size})
		}
		return result, out, nil
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "list_files", Title: "List a session's files",
		Description: "List the files and directories of a session's working directory (or of one directory in it) with type, size and " +
			"modification time; symbolic links are listed as such and never followed. Files a run writes to " + engine.OutputDir + "/ come back with that run.",
		InputSchema: schemaFor[ListInput](), OutputSchema: schemaFor[ListOutput](),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListOutput, error) {
		entries, truncated, err := s.files.ListFiles(s.conn(req.Session), in.SessionID, in.Path)
		if err != nil {
			res, info := failure(err)
			return res, ListOutput{SessionID: in.SessionID, Error: info}, nil
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d entries in session %s.\n", len(entries), in.SessionID)
		for _, e := range entries {
			if e.Type == "file" {
				fmt.Fprintf(&b, "- %s (%d bytes)\n", e.Path, e.Size)
			} else {
				fmt.Fprintf(&b, "- %s (%s)\n", e.Path, e.Type)
			}
		}
		if truncated {
			b.WriteString("(more entries were left out: list a subdirectory)\n")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, ListOutput{SessionID: in.SessionID, Files: entries, Truncated: truncated}, nil
	})
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "session-file", Title: "Session file", URITemplate: FilesTemplate,
		Description: fmt.Sprintf("A file of a session's working directory (path relative to it, segments percent-encoded), at most %s", size(s.files.MaxFileSize())),
	}, s.fileResource)
	s.addCheckpointTools() // checkpoint.go
}

// contents is a file as resource contents: text when it is UTF-8 without
// NUL bytes, else a blob.
func contents(uri, mimeType string, data []byte) *mcp.ResourceContents {
	rc := &mcp.ResourceContents{URI: uri, MIMEType: mimeType}
	if utf8.Valid(data) && !strings.ContainsRune(string(data), 0) {
		rc.Text = string(data)
		if len(data) == 0 {
			rc.Blob = []byte{} // an empty text would be omitted on the wire
			rc.Text = ""
		}
	} else {
		rc.Blob = data
	}
	return rc
}

func (s *Server) fileResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, rel, ok := parseFileURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	fi, err := s.files.ReadFile(s.conn(req.Session), id, rel, "resources/read")
	var re *refusal.Error
	if errors.As(err, &re) {
		switch re.Rule {
		case session.RuleSessionID, session.RuleSessionNotFound, engine.RuleFileNotFound:
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, errors.New(re.Msg) // a refused path: say why
	}
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents(uri, fi.MIMEType, fi.Data)}}, nil
}

// addOutputFiles attaches what a session run wrote to its output
// directory: small files as embedded resources, larger ones as links.
func addOutputFiles(result *mcp.CallToolResult, out *ExecuteOutput, id string, files []engine.OutputFile) {
	if len(files) == 0 {
		return
	}
	var lines []string
	for _, f := range files {
		uri := FileURI(id, f.Path)
		ref := OutputFileRef{Path: f.Path, Size: f.Size, MIMEType: f.MIMEType, URI: uri, Inline: f.Data != nil}
		out.Files = append(out.Files, ref)
		if f.Data != nil {
			result.Content = append(result.Content, &mcp.EmbeddedResource{Resource: contents(uri, f.MIMEType, f.Data)})
			lines = append(lines, fmt.Sprintf("- %s (%d bytes, %s), attached", f.Path, f.Size, f.MIMEType))
		} else {
			size := f.Size
			result.Content = append(result.Content, &mcp.ResourceLink{URI: uri, Name: f.Path, MIMEType: f.MIMEType, Size: &size})
			lines = append(lines, fmt.Sprintf("- %s (%d bytes, %s): read %s", f.Path, f.Size, f.MIMEType, uri))
		}
	}
	if len(result.Content) > 0 {
		if tc, ok := result.Content[0].(*mcp.TextContent); ok {
			tc.Text += fmt.Sprintf("\n%d file(s) written to %s/:\n%s\n", len(files), engine.OutputDir, strings.Join(lines, "\n"))
		}
	}
}
