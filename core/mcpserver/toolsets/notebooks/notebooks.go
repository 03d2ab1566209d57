// Package notebooks is the toolset of sessions as work products:
// fork_session, export_notebook, and the resources of a session's history
// and notebook.
package notebooks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/engine/checkpoints"
	"github.com/mcp-forge/mcp-forge/core/engine/history"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/sessions"
	"github.com/mcp-forge/mcp-forge/core/notebook"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// Sessions as work products: a session's history of executed cells, its
// export as a Jupyter notebook, and forks.

// ForkInput is fork_session's input.
type ForkInput struct {
	SessionID    string `json:"session_id" jsonschema:"the session to fork (live and idle)"`
	NewSessionID string `json:"new_session_id,omitempty" jsonschema:"the fork's session_id (1-128 letters, digits, '-' or '_', not one of your sessions or checkpoints); default: <session_id>-fork-<random>. With count: the forks are <new_session_id>-1 … -<count>"`
	Count        int    `json:"count,omitempty" jsonschema:"how many forks to make at once from one copy of the source, 1 to 8 (default 1): the source is saved once and each fork restores it side by side; all are made or none"`
}

// ForkOutput describes a fork, or gives the error.
type ForkOutput struct {
	SessionID string              `json:"session_id" jsonschema:"the new session, the first with count (on error: new_session_id as given)"`
	Forks     []string            `json:"session_ids,omitempty" jsonschema:"with count over 1: every fork made, in order"`
	Source    string              `json:"source_session_id"`
	Saved     []string            `json:"copied,omitempty" jsonschema:"variables copied"`
	Skipped   map[string]string   `json:"not_copied,omitempty" jsonschema:"variables that could not be copied → why"`
	FilesLeft []string            `json:"files_left_out,omitempty" jsonschema:"entries of the working directory not copied (links, pipes)"`
	Other     []string            `json:"notices,omitempty" jsonschema:"what else the fork does not have"`
	Bytes     int64               `json:"bytes,omitempty" jsonschema:"bytes copied (namespace and files)"`
	ForkTime  float64             `json:"fork_time,omitempty" jsonschema:"seconds the fork took"`
	Kind      string              `json:"kind,omitempty" jsonschema:"snapshot: the whole sandbox was copied (memory, imports, open files, sockets), under gVisor; variables: the variables that could be"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

// NotebookOutput is an exported notebook, or the error.
type NotebookOutput struct {
	SessionID string              `json:"session_id"`
	URI       string              `json:"uri,omitempty" jsonschema:"the notebook as a resource, readable with resources/read"`
	Name      string              `json:"name,omitempty" jsonschema:"a file name for it"`
	MIMEType  string              `json:"mime_type,omitempty"`
	Cells     int                 `json:"cells,omitempty" jsonschema:"code cells: the session's executed cells its history keeps"`
	Dropped   int                 `json:"cells_dropped,omitempty" jsonschema:"executed cells no longer in the history (sessions.history_cells, sessions.history_bytes)"`
	Size      int                 `json:"size,omitempty" jsonschema:"bytes"`
	Notebook  string              `json:"notebook,omitempty" jsonschema:"the .ipynb (nbformat 4.5 JSON text)"`
	Error     *toolsets.ErrorInfo `json:"error,omitempty"`
}

// HistoryImage is an image a cell produced.
type HistoryImage struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Size     int    `json:"size"`
	Data     string `json:"data" jsonschema:"base64"`
}

// HistoryCell is one executed cell of a session.
type HistoryCell struct {
	Count       int                 `json:"execution_count"`
	Code        string              `json:"code"`
	Started     time.Time           `json:"started,omitzero"`
	Duration    float64             `json:"execution_time" jsonschema:"seconds"`
	Success     bool                `json:"success"`
	Stdout      string              `json:"stdout,omitempty"`
	Stderr      string              `json:"stderr,omitempty"`
	StdoutBytes int64               `json:"stdout_bytes,omitempty"`
	StderrBytes int64               `json:"stderr_bytes,omitempty"`
	Result      string              `json:"result,omitempty"`
	ResultRepr  string              `json:"result_repr,omitempty"`
	Rich        map[string]string   `json:"rich,omitempty"`
	Images      []HistoryImage      `json:"images,omitempty"`
	Error       *toolsets.ErrorInfo `json:"error,omitempty"`
	OutputsLeft bool                `json:"outputs_left_out,omitempty"`
}

func historyCells(h session.History) []HistoryCell {
	out := make([]HistoryCell, 0, len(h.Cells))
	for _, c := range h.Cells {
		hc := HistoryCell{Count: c.Count, Code: c.Code, Started: c.Started, Duration: c.Duration.Seconds(), Success: c.Success,
			Stdout: c.Stdout, Stderr: c.Stderr, StdoutBytes: c.StdoutBytes, StderrBytes: c.StderrBytes, ResultRepr: c.ResultRepr, Rich: c.Rich,
			OutputsLeft: c.OutputsLeft}
		if c.ResultJSON != "" && json.Valid([]byte(c.ResultJSON)) {
			hc.Result = c.ResultJSON
		}
		for _, im := range c.Images {
			hc.Images = append(hc.Images, HistoryImage{Name: im.Name, MIMEType: im.MIMEType, Size: len(im.Data), Data: base64.StdEncoding.EncodeToString(im.Data)})
		}
		if e := c.Error; e != nil {
			hc.Error = &toolsets.ErrorInfo{Type: e.Name, Message: e.Message, Line: e.Line, Column: e.Column, Traceback: e.Traceback}
		}
		out = append(out, hc)
	}
	return out
}

// Notebooks is what fork_session, export_notebook and the history and
// notebook resources need; InlineFileSize bounds a notebook
// sent inline (as the file tools do).
type Notebooks interface {
	ForkSessions(ctx context.Context, client, from, to string, count int) ([]checkpoints.ForkInfo, error)
	History(client, id, tool string) (session.History, session.View, error)
	ExportNotebook(client, id, tool string) (history.Notebook, error)
	InlineFileSize() int64
}

type tools struct {
	env toolsets.Env
	n   Notebooks
}

// Toolset is the notebook tools and resources.
func Toolset(env toolsets.Env, n Notebooks) toolsets.Toolset {
	t := tools{env, n}
	return toolsets.Toolset{Name: "notebooks",
		Tools: []toolsets.Tool{Fork(env, n), Export(env, n)},
		Templates: []toolsets.Template{{Def: &mcp.ResourceTemplate{
			Name: "session-history", Title: "Session history", URITemplate: toolsets.HistoryTemplate, MIMEType: "application/json",
			Description: "The cells executed in a session, in order: code, stdout, stderr, result, images (base64), error and timing (bounded by sessions.history_cells and sessions.history_bytes)",
		}, Handler: t.historyResource}, {Def: &mcp.ResourceTemplate{
			Name: "session-notebook", Title: "Session notebook", URITemplate: toolsets.NotebookTemplate, MIMEType: notebook.MIMEType,
			Description: "A session's history as a Jupyter notebook (nbformat 4.5), as export_notebook returns it",
		}, Handler: t.notebookResource}}}
}

// Fork is fork_session.
func Fork(env toolsets.Env, n Notebooks) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "fork_session", Title: "Fork a session", Meta: toolsets.ViewMeta(),
		Description: "Start a new session (its own session_id, kernel and container) with a copy of a live, idle session's variables and working directory, " +
			"made as checkpoint_session makes one and restored in the new kernel, plus its documentation and history: under gVisor a snapshot of the whole sandbox " +
			"(memory, imports, open files, sockets: kind snapshot), otherwise variable by variable (Python: dill; R: save; kind variables). " +
			"The two then diverge: a change in one is invisible in the other. Variables that cannot be copied (open files, connections) are listed in not_copied with the reason. " +
			"The copy counts against the session quota and the checkpoint store while it is made; the fork counts as a session. " +
			"On error the result has session_id (new_session_id as given), source_session_id and error {type, message}.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ForkInput) (*mcp.CallToolResult, ForkOutput, error) {
		count := in.Count
		if count == 0 {
			count = 1
		}
		forks, err := n.ForkSessions(ctx, env.Conn(req.Session), in.SessionID, in.NewSessionID, count)
		if err != nil {
			res, e := toolsets.Failure(err)
			return res, ForkOutput{SessionID: in.NewSessionID, Source: in.SessionID, Error: e}, nil
		}
		info := forks[0]
		out := ForkOutput{SessionID: info.SessionID, Source: info.Source, Saved: info.Saved, Skipped: info.Skipped, FilesLeft: info.FilesLeft,
			Other: info.NotCopied, Bytes: info.Bytes, ForkTime: info.Duration.Seconds(), Kind: "variables"}
		if info.Kind == checkpoint.KindSnapshot {
			out.Kind = info.Kind
		}
		if len(forks) > 1 {
			for _, f := range forks {
				out.Forks = append(out.Forks, f.SessionID)
			}
		}
		return toolcall.Text(forkText(forks)), out, nil
	})
}

// Export is export_notebook.
func Export(env toolsets.Env, n Notebooks) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "export_notebook", Title: "Export a session as a Jupyter notebook",
		Description: fmt.Sprintf("The cells executed in a session, in order, as a Jupyter notebook (nbformat 4.5, the kernelspec of the session's kernel: "+
			"ipykernel for Python, IRkernel for R) with each cell's outputs as the kernel would have written them: stdout and stderr streams, the result, "+
			"images embedded, the error. A session keeps its last %d cells and at most %s (sessions.history_cells, sessions.history_bytes); older ones are dropped "+
			"and the notebook says how many. Also readable as the resource %s; the cells with their outputs as JSON at %s. "+
			"On error the result has session_id and error {type, message}.", env.Cfg.Sessions.HistoryCells, env.Cfg.Sessions.HistoryBytes, toolsets.NotebookTemplate, toolsets.HistoryTemplate),
	}, func(ctx context.Context, req *mcp.CallToolRequest, in sessions.SessionInput) (*mcp.CallToolResult, NotebookOutput, error) {
		nb, err := n.ExportNotebook(env.Conn(req.Session), in.SessionID, "export_notebook")
		if err != nil {
			res, e := toolsets.Failure(err)
			return res, NotebookOutput{SessionID: in.SessionID, Error: e}, nil
		}
		uri, name := toolsets.NotebookURI(nb.SessionID), nb.SessionID+".ipynb"
		out := NotebookOutput{SessionID: nb.SessionID, URI: uri, Name: name, MIMEType: notebook.MIMEType, Cells: nb.Cells, Dropped: nb.Dropped,
			Size: len(nb.Data), Notebook: string(nb.Data)}
		text := fmt.Sprintf("Notebook of session %s: %d cell(s), %d bytes (%s).", nb.SessionID, nb.Cells, len(nb.Data), name)
		if nb.Dropped > 0 {
			text += fmt.Sprintf(" %d earlier cell(s) are no longer in the session's history.", nb.Dropped)
		}
		// The notebook travels once in full (structured content); as for
		// download_file, a large one is linked rather than sent twice.
		res := toolcall.Text(text)
		if int64(len(nb.Data)) <= n.InlineFileSize() {
			res.Content = append(res.Content, &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: uri, MIMEType: notebook.MIMEType, Text: string(nb.Data)}})
		} else {
			size := int64(len(nb.Data))
			res.Content = append(res.Content, &mcp.ResourceLink{URI: uri, Name: name, MIMEType: notebook.MIMEType, Size: &size})
		}
		return res, out, nil
	})
}

func forkText(forks []checkpoints.ForkInfo) string {
	var b strings.Builder
	info := forks[0]
	into := info.SessionID
	if len(forks) > 1 {
		var ids []string
		for _, f := range forks {
			ids = append(ids, f.SessionID)
		}
		into = fmt.Sprintf("%d sessions (%s), side by side from one copy", len(forks), strings.Join(ids, ", "))
	}
	if info.Kind == checkpoint.KindSnapshot {
		fmt.Fprintf(&b, "Forked session %s into %s in %.2f s: its whole sandbox copied (memory, imports, open files, sockets), %d bytes.", info.Source, into, info.Duration.Seconds(), info.Bytes)
	} else {
		fmt.Fprintf(&b, "Forked session %s into %s in %.2f s: %d variable(s) copied (%s), %d bytes.", info.Source, into, info.Duration.Seconds(),
			len(info.Saved), strings.Join(info.Saved, ", "), info.Bytes)
		if info.NotWhole != "" {
			fmt.Fprintf(&b, " Not a copy of the whole sandbox: %s.", info.NotWhole)
		}
		sessions.LeftOut(&b, "Not copied:", info.Skipped, info.FilesLeft)
	}
	for _, n := range info.NotCopied {
		fmt.Fprintf(&b, "\nnote: %s", n)
	}
	return b.String()
}

// hidden reports whether a refusal of a resource read is "no such
// resource": an unknown id, another connection's session, an invalid id.
func hidden(err error) bool {
	var re *refusal.Error
	return errors.As(err, &re) && (re.Rule == session.RuleSessionID || re.Rule == session.RuleSessionNotFound)
}

func (t tools) historyResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := toolsets.SessionOf(uri, "history")
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	h, v, err := t.n.History(t.env.Conn(req.Session), id, "resources/read")
	if hidden(err) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	body := struct {
		ID       string        `json:"session_id"`
		Language string        `json:"language"`
		Cells    []HistoryCell `json:"cells"`
		Dropped  int           `json:"cells_dropped"`
		Bytes    int64         `json:"bytes"`
		Limits   any           `json:"limits"`
		Notebook string        `json:"notebook"`
	}{v.ID, v.Language, historyCells(h), h.Dropped, h.Bytes,
		map[string]any{"history_cells": t.env.Cfg.Sessions.HistoryCells, "history_bytes": t.env.Cfg.Sessions.HistoryBytes.String()}, toolsets.NotebookURI(v.ID)}
	// Without HTML escapes, as the notebook (core/notebook): code and
	// text/html are most of a history, and "<" is not six bytes.
	var data strings.Builder
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("the history of session %q as JSON: %w", id, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: data.String()}}}, nil
}

func (t tools) notebookResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := toolsets.SessionOf(uri, "notebook")
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	nb, err := t.n.ExportNotebook(t.env.Conn(req.Session), id, "resources/read")
	if hidden(err) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var re *refusal.Error
	if errors.As(err, &re) {
		return nil, errors.New(re.Msg) // history off: say so
	}
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: notebook.MIMEType, Text: string(nb.Data)}}}, nil
}
