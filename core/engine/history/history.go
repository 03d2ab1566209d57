// Package history reads a session's history back to its owner: the
// history resource, and export_notebook, which writes it as a Jupyter
// notebook (core/notebook). The engine records each execute's cell
// (core/session keeps them); the audit log gets what was read, never the
// cells.
package history

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/notebook"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
)

// RuleHistoryOff refuses export_notebook when sessions.history_cells is 0.
const RuleHistoryOff = "history-off"

// Engine is what reading a history needs of the engine: a client's
// session, what its backend reports, and refusals audited as it audits
// them.
type Engine interface {
	Registry() *session.Registry
	Lookup(ctx context.Context, client, id, tool string) (*session.Session, error)
	PluginStatuses() []plugins.Status
	LanguageName(language string) string
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Reader reads the histories of an engine's sessions.
type Reader struct {
	eng      Engine
	sessions *session.Registry
	cfg      config.Config
	rec      audit.Recorder
}

// New reads the histories of eng's sessions.
func New(cfg config.Config, eng Engine, rec audit.Recorder) *Reader {
	return &Reader{eng: eng, sessions: eng.Registry(), cfg: cfg, rec: rec}
}

// History is a session's history, for its owner (tool names the reader
// for the audit log: resources/read).
func (h *Reader) History(client, id, tool string) (session.History, session.View, error) {
	ctx := context.Background() // in memory, but for a session to take over
	s, err := h.eng.Lookup(ctx, client, id, tool)
	if err != nil {
		return session.History{}, session.View{}, err
	}
	hist := h.sessions.HistoryOf(s)
	h.rec.Record(audit.Entry{Event: "session.history", SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": id, "tool": tool, "cells": len(hist.Cells), "bytes": hist.Bytes}})
	return hist, h.sessions.View(s), nil
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
func (h *Reader) ExportNotebook(client, id, tool string) (Notebook, error) {
	ctx := context.Background() // in memory, but for a session to take over
	if h.cfg.Sessions.HistoryCells == 0 {
		if _, err := h.eng.Lookup(ctx, client, id, tool); err != nil {
			return Notebook{}, err
		}
		return Notebook{}, h.eng.Refuse(client, id, tool, refusal.New(RuleHistoryOff, "session %q has no history to export: the operator turned history off (sessions.history_cells = 0)", id), nil)
	}
	s, err := h.eng.Lookup(ctx, client, id, tool)
	if err != nil {
		return Notebook{}, err
	}
	hist := h.sessions.HistoryOf(s)
	info := notebook.Info{SessionID: s.ID, Language: s.Language, LanguageName: h.eng.LanguageName(s.Language), Exported: time.Now(),
		MaxCells: h.cfg.Sessions.HistoryCells, MaxBytes: h.cfg.Sessions.HistoryBytes.String()}
	for _, st := range h.eng.PluginStatuses() {
		if st.Name == s.Backend {
			info.LanguageVersion = st.Capabilities.LanguageVersion
			break
		}
	}
	data, err := notebook.Build(info, hist)
	if err != nil {
		return Notebook{}, fmt.Errorf("export the notebook of session %q: %w", id, err)
	}
	h.rec.Record(audit.Entry{Event: "session.export_notebook", SessionID: s.Internal, UserID: client, Success: true,
		Details: map[string]any{"session": id, "tool": tool, "cells": len(hist.Cells), "dropped": hist.Dropped, "bytes": len(data)}})
	return Notebook{SessionID: s.ID, Data: data, Cells: len(hist.Cells), Dropped: hist.Dropped}, nil
}
