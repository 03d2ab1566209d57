package session

import (
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

func TestHistoryBounds(t *testing.T) {
	code := func(n int) Cell { return Cell{Code: strings.Repeat("x", n)} }
	withImage := func(code, img int) Cell {
		return Cell{Code: strings.Repeat("y", code), Images: []backend.Image{{Data: make([]byte, img)}}, Stdout: "out"}
	}
	for _, c := range []struct {
		name     string
		maxCells int
		maxBytes int64
		add      []Cell
		// what is kept: each cell's Count, and whether its outputs were left out
		wantCounts  []int
		wantLeft    []bool
		wantDropped int
	}{
		{"within bounds", 5, 1000, []Cell{code(10), code(10), code(10)}, []int{1, 2, 3}, []bool{false, false, false}, 0},
		{"cells bound drops the oldest", 2, 1000, []Cell{code(10), code(10), code(10), code(10)}, []int{3, 4}, []bool{false, false}, 2},
		{"bytes bound drops the oldest", 10, 25, []Cell{code(10), code(10), code(10)}, []int{2, 3}, []bool{false, false}, 1},
		{"a cell over the bytes bound keeps its code", 10, 100, []Cell{code(10), withImage(20, 500)}, []int{1, 2}, []bool{false, true}, 0},
		{"a cell whose code alone is over the bound is dropped", 10, 100, []Cell{code(10), code(101), code(10)}, []int{1, 3}, []bool{false, false}, 1},
		{"a large cell evicts what it must", 10, 100, []Cell{code(40), code(40), code(90)}, []int{3}, []bool{false}, 2},
		{"no history", 0, 100, []Cell{code(1), code(1)}, nil, nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h History
			for _, cell := range c.add {
				h.Add(cell, c.maxCells, c.maxBytes)
			}
			var counts []int
			var left []bool
			var sum int64
			for _, cell := range h.Cells {
				counts = append(counts, cell.Count)
				left = append(left, cell.OutputsLeft)
				sum += cell.Size()
			}
			if !equal(counts, c.wantCounts) || !equal(left, c.wantLeft) || h.Dropped != c.wantDropped {
				t.Fatalf("kept counts %v left %v dropped %d; want %v %v %d", counts, left, h.Dropped, c.wantCounts, c.wantLeft, c.wantDropped)
			}
			if sum != h.Bytes || h.Bytes > c.maxBytes || len(h.Cells) > c.maxCells {
				t.Fatalf("bytes %d (cells sum to %d), %d cells: over the bounds %d/%d", h.Bytes, sum, len(h.Cells), c.maxCells, c.maxBytes)
			}
			if h.Dropped+len(h.Cells) != len(c.add) {
				t.Fatalf("%d kept + %d dropped != %d added", len(h.Cells), h.Dropped, len(c.add))
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A clone (what a fork starts from) diverges from its original.
func TestHistoryCloneDiverges(t *testing.T) {
	var h History
	h.Add(Cell{Code: "a = 1"}, 10, 1000)
	c := h.Clone()
	c.Add(Cell{Code: "b = 2"}, 10, 1000)
	h.Add(Cell{Code: "c = 3"}, 10, 1000)
	if len(h.Cells) != 2 || h.Cells[1].Code != "c = 3" || len(c.Cells) != 2 || c.Cells[1].Code != "b = 2" {
		t.Fatalf("original %+v clone %+v", h.Cells, c.Cells)
	}
	if c.Cells[1].Count != 2 || h.Cells[1].Count != 2 {
		t.Fatalf("counts continue from the fork point: %d %d", h.Cells[1].Count, c.Cells[1].Count)
	}
}

func TestRegistryHistoryIsACopy(t *testing.T) {
	r := NewRegistry()
	s := add(t, r, "alice", "main")
	r.Record(s, Cell{Code: "1"}, 10, 1000)
	h := r.HistoryOf(s)
	h.Cells[0].Code = "changed"
	if got := r.HistoryOf(s).Cells[0].Code; got != "1" {
		t.Fatalf("the registry's history changed through a copy: %q", got)
	}
}
