package kernel

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
)

// FuzzCollectorStreams: stream events (valid UTF-8, as the wire decoder
// makes them) of any sizes, cut by the output cap, give each stream as
// valid UTF-8 (protobuf refuses anything else), a prefix of what was printed
// that loses less than one character to the cap, and a byte count of
// everything printed; every event is passed on unchanged.
func FuzzCollectorStreams(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, maxOut uint8) {
		var emitted []backend.StreamEvent
		c := &collector{b: &Backend{}, maxOut: int64(maxOut), maxImg: 100,
			emit: func(e backend.StreamEvent) { emitted = append(emitted, e) }}
		var printed [2]strings.Builder
		var sent []backend.StreamEvent
		for _, chunk := range bytes.Split(data, []byte{0}) {
			name, i := "stdout", 0
			if len(chunk) > 0 && chunk[0]&1 == 1 {
				name, i = "stderr", 1
			}
			text := strings.ToValidUTF8(string(chunk[min(i, len(chunk)):]), "\uFFFD")
			printed[i].WriteString(text)
			sent = append(sent, backend.StreamEvent{Name: host.Stream(name), Text: text})
			c.event(jupyter.Event{Kind: "stream", Name: name, Text: text})
		}
		r := c.res
		for i, got := range []struct {
			name  string
			text  string
			count int64
		}{{"stdout", r.Stdout, r.StdoutBytes}, {"stderr", r.Stderr, r.StderrBytes}} {
			all := printed[i].String()
			if !utf8.ValidString(got.text) {
				t.Fatalf("%s is not valid UTF-8: %q", got.name, got.text)
			}
			if !strings.HasPrefix(all, got.text) {
				t.Fatalf("%s %q is not a prefix of what was printed %q", got.name, got.text, all)
			}
			if len(got.text) > int(maxOut) || (len(all) > len(got.text) && len(got.text) <= int(maxOut)-utf8.UTFMax) {
				t.Fatalf("%s kept %d of %d bytes under a cap of %d", got.name, len(got.text), len(all), maxOut)
			}
			if got.count != int64(len(all)) {
				t.Fatalf("%s counted %d bytes, %d were printed", got.name, got.count, len(all))
			}
		}
		if len(emitted) != len(sent) {
			t.Fatalf("emitted %d events of %d", len(emitted), len(sent))
		}
		for i := range sent {
			if emitted[i] != sent[i] {
				t.Fatalf("event %d emitted as %+v, was %+v", i, emitted[i], sent[i])
			}
		}
	})
}
