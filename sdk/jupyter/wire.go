// Package jupyter is a Jupyter wire-protocol client over ZeroMQ (pure Go,
// go-zeromq/zmq4) for kernels reached through ipc sockets: connection files,
// HMAC-SHA256 signing, the five channels, execute with streamed events,
// interrupt, shutdown and liveness. The jupyter and irkernel plugins share
// it, and so can third-party kernel backends.
package jupyter

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Connection is a kernel connection file.
type Connection struct {
	Transport       string `json:"transport"` // "ipc"
	IP              string `json:"ip"`        // ipc: the socket path prefix
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	Key             string `json:"key"`
	SignatureScheme string `json:"signature_scheme"`
	KernelName      string `json:"kernel_name,omitempty"`
}

// NewConnection returns an ipc connection whose sockets are prefix-<port>,
// with a fresh random key.
func NewConnection(prefix string) Connection {
	key := make([]byte, 32)
	rand.Read(key)
	return Connection{Transport: "ipc", IP: prefix, ShellPort: 1, IOPubPort: 2, StdinPort: 3, ControlPort: 4, HBPort: 5,
		Key: hex.EncodeToString(key), SignatureScheme: "hmac-sha256"}
}

// Endpoint is the ipc address of a channel's port, with the in-container
// prefix replaced by the host path where the sockets are visible.
func (c Connection) Endpoint(hostPrefix string, port int) string {
	p := c.IP
	if hostPrefix != "" {
		p = hostPrefix
	}
	if c.Transport == "ipc" {
		return fmt.Sprintf("ipc://%s-%d", p, port)
	}
	return fmt.Sprintf("%s://%s:%d", c.Transport, p, port)
}

// Header is a message header.
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// Message is a decoded wire message.
type Message struct {
	Identities [][]byte
	Header     Header
	Parent     Header
	Metadata   map[string]any
	Content    json.RawMessage
}

const delimiter = "<IDS|MSG>"

// ErrBadSignature is a message whose HMAC does not verify; it is dropped.
var ErrBadSignature = errors.New("jupyter: bad message signature")

type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	if len(s.key) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write(p)
	}
	sum := m.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode builds the frames of a message.
func (s signer) encode(m Message) ([][]byte, error) {
	h, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	var p []byte = []byte("{}")
	if m.Parent.MsgID != "" {
		if p, err = json.Marshal(m.Parent); err != nil {
			return nil, err
		}
	}
	md := []byte("{}")
	if m.Metadata != nil {
		if md, err = json.Marshal(m.Metadata); err != nil {
			return nil, err
		}
	}
	content := []byte(m.Content)
	if len(content) == 0 {
		content = []byte("{}")
	}
	frames := append([][]byte{}, m.Identities...)
	frames = append(frames, []byte(delimiter), s.sign(h, p, md, content), h, p, md, content)
	return frames, nil
}

// decode parses frames and verifies the signature.
func (s signer) decode(frames [][]byte) (Message, error) {
	i := 0
	for ; i < len(frames) && string(frames[i]) != delimiter; i++ {
	}
	if len(frames)-i < 6 {
		return Message{}, fmt.Errorf("jupyter: malformed message (%d frames)", len(frames))
	}
	m := Message{Identities: frames[:i]}
	sig, h, p, md, content := frames[i+1], frames[i+2], frames[i+3], frames[i+4], frames[i+5]
	if len(s.key) > 0 && !hmac.Equal(sig, s.sign(h, p, md, content)) {
		return Message{}, ErrBadSignature
	}
	if err := json.Unmarshal(h, &m.Header); err != nil {
		return Message{}, fmt.Errorf("jupyter: header: %w", err)
	}
	_ = json.Unmarshal(p, &m.Parent)
	_ = json.Unmarshal(md, &m.Metadata)
	m.Content = append(json.RawMessage(nil), content...)
	return m, nil
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newHeader(session, msgType string) Header {
	return Header{MsgID: newID(), Session: session, Username: "mcp-forge", Date: time.Now().UTC().Format(time.RFC3339Nano), MsgType: msgType, Version: "5.3"}
}
