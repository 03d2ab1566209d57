package session

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"

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

// Size is what a cell counts against the history's byte bound: the bytes
// it takes written in the notebook (and at most that in the history
// resource), not its raw length. A control character or an invalid UTF-8
// byte is a six-byte escape there, each line its own indented JSON string
// and an image base64. Counted raw, a history of 4 MiB of printed bytes
// 0x01 was a 24 MiB notebook, past what an MCP client reads in one message
// (the Go SDK's: 16 MiB), and export_notebook closed its connection.
func (c Cell) Size() int64 {
	n := jsonSize(c.Code) + jsonSize(c.Stdout) + jsonSize(c.Stderr) + jsonSize(c.ResultJSON) + jsonSize(c.ResultRepr)
	for k, v := range c.Rich {
		n += jsonSize(k) + jsonSize(v)
	}
	for _, im := range c.Images {
		// base64 in the notebook, or (SVG) its text as lines
		n += jsonSize(im.Name) + jsonSize(im.MIMEType) + max(base64.StdEncoding.EncodedLen(len(im.Data)), jsonSize(string(im.Data)))
	}
	if e := c.Error; e != nil {
		n += jsonSize(e.Name) + jsonSize(e.Message)
		for _, l := range e.Traceback {
			n += jsonSize(l)
		}
	}
	return int64(n)
}

// lineCost is what a newline adds in a notebook: its escape, and the
// line after it a new string of the indented list of lines (quotes, comma,
// newline and up to seven spaces of indent).
const lineCost = 13

// jsonSize bounds the bytes s takes in a notebook (core/notebook), as JSON
// without HTML escapes: quotes and backslashes escaped in two bytes, other
// control characters, invalid UTF-8 and U+2028/U+2029 in six, newlines
// lineCost.
func jsonSize(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n':
				n += lineCost
			case c == '"', c == '\\', c == '\r', c == '\t':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
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

// historyJSON is History as a snapshot keeps it, its count included.
type historyJSON struct {
	Cells   []Cell `json:"cells,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Dropped int    `json:"dropped,omitempty"`
	Count   int    `json:"count,omitempty"`
}

// MarshalJSON keeps the count of cells executed: the next cell after a
// snapshot's restore is numbered on from it.
func (h History) MarshalJSON() ([]byte, error) {
	return json.Marshal(historyJSON{h.Cells, h.Bytes, h.Dropped, h.count})
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *History) UnmarshalJSON(b []byte) error {
	var j historyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*h = History{Cells: j.Cells, Bytes: j.Bytes, Dropped: j.Dropped, count: j.Count}
	return nil
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
