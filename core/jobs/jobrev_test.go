package jobs

import (
	"strings"
	"testing"
	"time"
)

// A job that prints a lot in small pieces (a loop of print()) must not cost
// the server a copy of the whole tail per piece: with the default tail of
// execution.max_output (1 MiB), 20 MB written as 100-byte lines is 200 000
// writes. Keeping the tail must stay linear in what was written.
func TestJobRevTailIsLinear(t *testing.T) {
	const tailSize = 1 << 20
	r, _, err := New(Options{TTL: time.Hour, MaxPerClient: 5, TailBytes: tailSize})
	if err != nil {
		t.Fatal(err)
	}
	j, err := r.Add(Record{ID: NewID(), Client: "c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 99) + "\n"
	start := time.Now()
	const writes = 200_000 // 20 MB
	for i := 0; i < writes; i++ {
		j.Output(false, line)
	}
	took := time.Since(start)
	rec := j.Record()
	if len(rec.Stdout) != tailSize || rec.StdoutBytes != writes*100 {
		t.Fatalf("tail %d bytes of %d written", len(rec.Stdout), rec.StdoutBytes)
	}
	// Linear: 20 MB of appends is milliseconds; a copy of 1 MiB per write
	// is ~200 GB of memmove.
	if took > 2*time.Second {
		t.Fatalf("20 MB of 100-byte writes took %s to keep a %d-byte tail: the tail is copied whole on every write once full (tail.write), O(writes × tail)", took, tailSize)
	}
	t.Logf("20 MB of 100-byte writes: %s", took)
}
