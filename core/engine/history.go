package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/notebook"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The engine's side of a session's history (core/session keeps it): each
// execute's cell is recorded here, where every result passes, and read
// back for the history resource and export_notebook. The audit log gets
// what was read, never the cells.

// RuleHistoryOff refuses export_notebook when sessions.history_cells is 0.
const RuleHistoryOff = "history-off"

// recordCell adds what a session's execute ran and returned to its history.
// The cell started when the kernel began it: its duration before now (a
// session's first call also started the kernel, which is not the cell's).
func (e *Engine) recordCell(s *session.Session, code string, res backend.ExecuteResult) {
	c := session.Cell{Code: code, Started: time.Now().Add(-res.Duration), Duration: res.Duration, Success: res.Success,
		Stdout: res.Stdout, Stderr: res.Stderr, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes,
		ResultJSON: res.ResultJSON, ResultRepr: res.ResultRepr, Images: slices.Clone(res.Images)}
	if len(res.Rich) > 0 {
		c.Rich = maps.Clone(res.Rich)
	}
	if res.Error != nil {
		x := *res.Error
		x.Traceback = slices.Clone(x.Traceback)
		c.Error = &x
	}
	e.sessions.Record(s, c, e.cfg.Sessions.HistoryCells, int64(e.cfg.Sessions.HistoryBytes))
}

// History is a session's history, for its owner (tool names the reader
// for the audit log: resources/read).
func (e *Engine) History(client, id, tool string) (session.History, session.View, error) {
	ctx := context.Background() // in memory, but for a session to take over
	s, err := e.Lookup(ctx, client, id, tool)
	if err != nil {
		return session.History{}, session.View{}, err
	}
	h := e.sessions.HistoryOf(s)
	e.rec.Record(audit.Entry{Event: "session.history", SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": id, "tool": tool, "cells": len(h.Cells), "bytes": h.Bytes}})
	return h, e.sessions.View(s), nil
}

// Notebook is a session's history as an nbformat 4.5 notebook.
type Notebook struct {
	SessionID string
	Data      []byte // the .ipynb
	Cells     int    // code cells in it
	Dropped   int    // executed cells no longer in the history
}

// ExportNotebook writes a session's history as a notebook for its owner
// (export_notebook, or resources/read of the notebook resource).
func (e *Engine) ExportNotebook(client, id, tool string) (Notebook, error) {
	ctx := context.Background() // in memory, but for a session to take over
	if e.cfg.Sessions.HistoryCells == 0 {
		if _, err := e.Lookup(ctx, client, id, tool); err != nil {
			return Notebook{}, err
		}
		return Notebook{}, e.Refuse(client, id, tool, refusal.New(RuleHistoryOff, "session %q has no history to export: the operator turned history off (sessions.history_cells = 0)", id), nil)
	}
	s, err := e.Lookup(ctx, client, id, tool)
	if err != nil {
		return Notebook{}, err
	}
	h := e.sessions.HistoryOf(s)
	info := notebook.Info{SessionID: s.ID, Language: s.Language, LanguageName: e.LanguageName(s.Language), Exported: time.Now(),
		MaxCells: e.cfg.Sessions.HistoryCells, MaxBytes: e.cfg.Sessions.HistoryBytes.String()}
	if st, ok := status(e.plugins.Statuses(), s.Backend); ok {
		info.LanguageVersion = st.Capabilities.LanguageVersion
	}
	data, err := notebook.Build(info, h)
	if err != nil {
		return Notebook{}, fmt.Errorf("export the notebook of session %q: %w", id, err)
	}
	e.rec.Record(audit.Entry{Event: "session.export_notebook", SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": id, "tool": tool, "cells": len(h.Cells), "dropped": h.Dropped, "bytes": len(data)}})
	return Notebook{SessionID: s.ID, Data: data, Cells: len(h.Cells), Dropped: h.Dropped}, nil
}
