package files

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	enginefiles "github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// HostFiles is what the host-root tools need ([volumes.host_roots]): the
// user's own directories, whose files the core copies into and out of a
// session, their bytes never passing through MCP.
type HostFiles interface {
	HostRoots(client string) []*hostroots.Root
	ListHostFiles(client, root, dir string) ([]workspace.Entry, bool, error)
	ImportFile(ctx context.Context, client, id, root, rootPath, rel string) (enginefiles.FileInfo, error)
	ExportFile(ctx context.Context, client, id, rel, root, rootPath string) (enginefiles.FileInfo, error)
}

// ImportInput is import_file's input.
type ImportInput struct {
	SessionID string `json:"session_id" jsonschema:"the session whose working directory receives the file (created by an execute_<language> call with this session_id)"`
	Root      string `json:"root" jsonschema:"the host root to copy from (list_host_files lists yours)"`
	RootPath  string `json:"root_path" jsonschema:"the file, relative to the root, e.g. 2026/sales.csv"`
	Path      string `json:"path,omitempty" jsonschema:"where to put it, relative to the session's working directory; default: the file's name"`
}

// ExportInput is export_file's input.
type ExportInput struct {
	SessionID string `json:"session_id" jsonschema:"the session"`
	Path      string `json:"path" jsonschema:"the file, relative to the session's working directory, e.g. output/report.csv"`
	Root      string `json:"root" jsonschema:"a writable host root to copy it to"`
	RootPath  string `json:"root_path,omitempty" jsonschema:"where to put it, relative to the root; default: the file's name. A file there is replaced"`
}

// HostListInput is list_host_files's input.
type HostListInput struct {
	Root string `json:"root,omitempty" jsonschema:"the root to list; empty: list the roots you may use"`
	Path string `json:"path,omitempty" jsonschema:"a directory relative to the root; default: all of it"`
}

// HostFileOutput describes a file copied, or gives the error.
type HostFileOutput struct {
	SessionID string              `json:"session_id"`
	Path      string              `json:"path,omitempty" jsonschema:"relative to the session's working directory"`
	Root      string              `json:"root,omitempty"`
	RootPath  string              `json:"root_path,omitempty" jsonschema:"relative to the root"`
	Size      int64               `json:"size,omitempty" jsonschema:"bytes copied"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

// HostRoot is a root as list_host_files shows it.
type HostRoot struct {
	Name     string `json:"name"`
	Writable bool   `json:"writable"`
}

// HostListOutput lists the roots, or a root's files.
type HostListOutput struct {
	Roots     []HostRoot          `json:"roots,omitempty" jsonschema:"the roots you may use (without root)"`
	Root      string              `json:"root,omitempty"`
	Files     []workspace.Entry   `json:"files,omitempty" jsonschema:"sorted by path; links are listed, never followed"`
	Truncated bool                `json:"truncated,omitempty" jsonschema:"more entries exist than were listed"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

// rootsText names the configured roots for the tools' descriptions.
func rootsText(cfg config.Config) string {
	var l []string
	for _, n := range slices.Sorted(maps.Keys(cfg.Volumes.HostRoots)) {
		mode := "read-only"
		if cfg.Volumes.HostRoots[n].Writable {
			mode = "writable"
		}
		l = append(l, n+" ("+mode+")")
	}
	return strings.Join(l, ", ")
}

// HostTools are list_host_files, import_file and export_file: nil unless
// host roots are configured.
func HostTools(env toolsets.Env, h HostFiles) []toolsets.Tool {
	if len(env.Cfg.Volumes.HostRoots) == 0 || h == nil {
		return nil
	}
	roots := rootsText(env.Cfg)
	list := toolsets.New(&mcp.Tool{
		Name: "list_host_files", Title: "List the user's files in a host root",
		Description: "Without root: the host roots you may use, directories of the user's machine the operator allowed (" + roots + "). " +
			"With root: its files and directories (type, size, modification time), to find what to import_file into a session without its bytes passing through this conversation. " +
			"Links are listed, never followed.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in HostListInput) (*mcp.CallToolResult, HostListOutput, error) {
		client := env.Conn(req.Session)
		if in.Root == "" {
			var out HostListOutput
			var b strings.Builder
			for _, r := range h.HostRoots(client) {
				out.Roots = append(out.Roots, HostRoot{Name: r.Name, Writable: r.Writable})
				fmt.Fprintf(&b, "- %s (writable: %v)\n", r.Name, r.Writable)
			}
			if len(out.Roots) == 0 {
				return toolcall.Text("No host root is yours."), out, nil
			}
			return toolcall.Text(fmt.Sprintf("%d host root(s):\n%s", len(out.Roots), b.String())), out, nil
		}
		entries, truncated, err := h.ListHostFiles(client, in.Root, in.Path)
		if err != nil {
			res, info := toolsets.Failure(err)
			return res, HostListOutput{Root: in.Root, Error: info}, nil
		}
		text := listing(fmt.Sprintf("%d entries in host root %s.", len(entries), in.Root), entries, truncated)
		return toolcall.Text(text), HostListOutput{Root: in.Root, Files: entries, Truncated: truncated}, nil
	})
	imp := toolsets.New(&mcp.Tool{
		Name: "import_file", Title: "Copy a file of the user's into a session",
		Description: fmt.Sprintf("Copy a file from a host root (%s) into a session's working directory, where its code opens it: the server copies it, so its bytes never pass through "+
			"this conversation, whatever its size within the session's quota of %s. Paths are relative: absolute paths, '..', links, devices and pipes are refused. "+
			"An existing file is replaced. The session must exist (run code in it first).", roots, env.Cfg.Volumes.SessionQuota),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ImportInput) (*mcp.CallToolResult, HostFileOutput, error) {
		fi, err := h.ImportFile(ctx, env.Conn(req.Session), in.SessionID, in.Root, in.RootPath, in.Path)
		out := HostFileOutput{SessionID: in.SessionID, Path: fi.Path, Root: in.Root, RootPath: in.RootPath, Size: fi.Size}
		if err != nil {
			res, info := toolsets.Failure(err)
			out.Error = info
			return res, out, nil
		}
		return toolcall.Text(fmt.Sprintf("Copied %s:%s (%d bytes) to %s in session %s.", in.Root, in.RootPath, fi.Size, fi.Path, in.SessionID)), out, nil
	})
	exp := toolsets.New(&mcp.Tool{
		Name: "export_file", Title: "Copy a session's file to the user's disk",
		Description: "Copy a file of a session's working directory into a writable host root (" + roots + ") on the user's machine: the server copies it, " +
			"so its bytes never pass through this conversation. Paths are relative: absolute paths, '..' and links are refused; a file at root_path is replaced.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ExportInput) (*mcp.CallToolResult, HostFileOutput, error) {
		fi, err := h.ExportFile(ctx, env.Conn(req.Session), in.SessionID, in.Path, in.Root, in.RootPath)
		out := HostFileOutput{SessionID: in.SessionID, Path: in.Path, Root: in.Root, RootPath: fi.Path, Size: fi.Size}
		if err != nil {
			res, info := toolsets.Failure(err)
			out.Error = info
			return res, out, nil
		}
		return toolcall.Text(fmt.Sprintf("Copied %s (%d bytes) from session %s to %s:%s.", in.Path, fi.Size, in.SessionID, in.Root, fi.Path)), out, nil
	})
	return []toolsets.Tool{list, imp, exp}
}
