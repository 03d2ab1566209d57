package jupyter

import (
	"encoding/json"
	"testing"
)

func TestSignAndVerify(t *testing.T) {
	s := signer{key: []byte("k")}
	frames, err := s.encode(Message{Identities: [][]byte{[]byte("id")}, Header: newHeader("sess", "execute_request"), Content: json.RawMessage(`{"code":"1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.decode(frames)
	if err != nil || m.Header.MsgType != "execute_request" || string(m.Identities[0]) != "id" || string(m.Content) != `{"code":"1"}` {
		t.Fatalf("round trip: %+v %v", m, err)
	}
	frames[len(frames)-1] = []byte(`{"code":"2"}`)
	if _, err := s.decode(frames); err != ErrBadSignature {
		t.Fatalf("tampered content: %v", err)
	}
	if _, err := (signer{key: []byte("other")}).decode(frames[:len(frames)-1]); err == nil {
		t.Fatal("short message accepted")
	}
}

func TestConnectionEndpoints(t *testing.T) {
	c := NewConnection("/forge/k/k")
	if len(c.Key) != 64 || c.SignatureScheme != "hmac-sha256" || c.Transport != "ipc" {
		t.Fatalf("%+v", c)
	}
	if got := c.Endpoint("/var/lib/x/k", c.ShellPort); got != "ipc:///var/lib/x/k-1" {
		t.Fatal(got)
	}
}

// A kernel that sends bytes that are not UTF-8 (ipykernel encodes Python's
// surrogate escapes as raw bytes) is decoded with U+FFFD, and the event
// says so, so that the result can carry a notice.
func TestEventFlagsInvalidUTF8(t *testing.T) {
	m := Message{Header: Header{MsgType: "stream"}, Content: []byte("{\"name\": \"stdout\", \"text\": \"a\xffb\"}")}
	ev, ok := toEvent(m)
	if !ok || ev.Text != "a\uFFFDb" || !ev.InvalidUTF8 {
		t.Fatalf("%+v", ev)
	}
	m.Content = []byte(`{"name": "stdout", "text": "ok ✓"}`)
	if ev, _ := toEvent(m); ev.InvalidUTF8 || ev.Text != "ok ✓" {
		t.Fatalf("%+v", ev)
	}
}
