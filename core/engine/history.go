package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The engine's side of a session's history (core/session keeps it): each
// execute's cell is recorded here, where every result passes; it is read
// back by core/engine/history.

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
