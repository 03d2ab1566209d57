package session

import (
	"slices"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// A session's history: the cells its client executed, in order, with what
// came back, for the history resource and export_notebook. It is session
// data of the session's owner, kept in the server's memory with the
// session and gone with it; the audit log has only a hash of each cell's
// code. It is bounded in cells and bytes (sessions.history_cells,
// sessions.history_bytes): the oldest cells go first.

// Cell is one executed cell: its code, what it wrote and returned, its
// images, its error and its timing.
type Cell struct {
	Count       int // execution count within the session: 1, 2, ... (never reused)
	Code        string
	Started     time.Time
	Duration    time.Duration
	Success     bool
	Stdout      string
	Stderr      string
	StdoutBytes int64 // written in all: Stdout may have been cut at execution.max_output
	StderrBytes int64
	ResultJSON  string
	ResultRepr  string
	Rich        map[string]string // other output by MIME type (text/html)
	Images      []backend.Image
	Error       *backend.ExecError
	// OutputsLeft: the cell's outputs were left out because the cell
	// alone was larger than the history's byte bound; its code is kept.
	OutputsLeft bool
}

// Size is what a cell counts against the history's byte bound.
func (c Cell) Size() int64 {
	n := len(c.Code) + len(c.Stdout) + len(c.Stderr) + len(c.ResultJSON) + len(c.ResultRepr)
	for k, v := range c.Rich {
		n += len(k) + len(v)
	}
	for _, im := range c.Images {
		n += len(im.Name) + len(im.MIMEType) + len(im.Data)
	}
	if e := c.Error; e != nil {
		n += len(e.Name) + len(e.Message)
		for _, l := range e.Traceback {
			n += len(l)
		}
	}
	return int64(n)
}

// withoutOutputs is c with only its code, count and timing.
func (c Cell) withoutOutputs() Cell {
	return Cell{Count: c.Count, Code: c.Code, Started: c.Started, Duration: c.Duration, Success: c.Success,
		StdoutBytes: c.StdoutBytes, StderrBytes: c.StderrBytes, OutputsLeft: true}
}

// History is a session's kept cells, oldest first.
type History struct {
	Cells   []Cell
	Bytes   int64 // the kept cells' Size, summed
	Dropped int   // cells executed and no longer kept (the bounds)
	count   int   // cells executed: the next cell's Count is count+1
}

// Add appends c (its Count set to the next execution count) and drops the
// oldest cells until at most maxCells cells of at most maxBytes bytes are
// kept. A cell larger than maxBytes by itself keeps its code only; one
// whose code alone is larger is counted as dropped. maxCells 0 keeps
// nothing.
func (h *History) Add(c Cell, maxCells int, maxBytes int64) {
	h.count++
	c.Count = h.count
	if maxCells <= 0 {
		h.Dropped++
		return
	}
	if c.Size() > maxBytes {
		c = c.withoutOutputs()
	}
	if c.Size() > maxBytes {
		h.Dropped++
		return
	}
	h.Cells = append(h.Cells, c)
	h.Bytes += c.Size()
	n := 0
	for len(h.Cells)-n > maxCells || h.Bytes > maxBytes {
		h.Bytes -= h.Cells[n].Size()
		n++
	}
	if n > 0 {
		h.Dropped += n
		h.Cells = slices.Delete(h.Cells, 0, n)
	}
}

// Clone is a copy of h that shares no slice with it (cells are never
// changed once added, so their contents are shared).
func (h History) Clone() History {
	h.Cells = slices.Clone(h.Cells)
	return h
}

// Record adds a cell to s's history within the bounds.
func (r *Registry) Record(s *Session, c Cell, maxCells int, maxBytes int64) {
	r.Update(s, func(s *Session) { s.History.Add(c, maxCells, maxBytes) })
}

// HistoryOf returns a copy of s's history.
func (r *Registry) HistoryOf(s *Session) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.History.Clone()
}
