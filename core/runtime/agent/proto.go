package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The file service's protocol: one request, then its response, in turn on
// the serve command's stdin and stdout. Each message is a frame: the
// header's length and the data's length (big-endian uint32s), the header
// as JSON (the typed struct below), then the data as it is (a file's
// bytes are never encoded).

// Op names a file operation.
type Op string

// The operations of the file service.
const (
	OpList    Op = "list"    // walk a directory: Entries, More
	OpReadDir Op = "readdir" // the regular files directly in a directory, with their contents within Max and MaxTotal
	OpRead    Op = "read"    // a regular file of at most Max bytes
	OpWrite   Op = "write"   // replace a file with the request's data (parents made)
	OpStat    Op = "stat"    // a regular file's size
	OpRemove  Op = "remove"  // unlink a file (not a directory)
	OpStatfs  Op = "statfs"  // the workspace's filesystem
	// OpLogs: the sandbox's captured output (Init's OUTDIR, which serve
	// is given): the first Max bytes of stdout then of stderr as the
	// data, and the totals Init counted (none while it runs).
	OpLogs Op = "logs"
)

// Request is one file operation. Path is relative to the workspace
// ("." for its root) and may not leave it.
type Request struct {
	Op   Op     `json:"op"`
	Path string `json:"path"`
	// Max: entries for list, bytes of a file for read and readdir.
	Max int64 `json:"max,omitempty"`
	// MaxTotal bounds the contents readdir returns.
	MaxTotal int64 `json:"max_total,omitempty"`
	// Replace: write replaces a link at the path (never writing through
	// it), remove removes one; otherwise a link on the path is refused.
	Replace bool `json:"replace,omitempty"`
}

// Code is why an operation failed (0: it did not).
type Code int

// The codes of Response.Code.
const (
	OK         Code = 0
	Failed     Code = 1 // anything else: Error says what
	NoFile     Code = 3 // no such file or directory
	TooLarge   Code = 4 // over the request's Max (Size says how large)
	NoSpace    Code = 5 // the workspace is full (ENOSPC, EDQUOT)
	Link       Code = 6 // a symbolic link on the path
	NotDir     Code = 7 // list of something that is not a directory
	NotRegular Code = 8 // a directory, device, socket or pipe where a file was asked for
	BadPath    Code = 9 // absolute, leaving the workspace, or over the name budget
)

// Entry is a file of a listing.
type Entry struct {
	Type     string `json:"type"` // file, directory, symlink, fifo, socket, device, other
	Size     int64  `json:"size"` // 0 but for files
	Modified int64  `json:"mtime_ns"`
	Ino      uint64 `json:"ino"`
	Path     string `json:"path"` // relative to the workspace
}

// FileData is a file of a readdir: its contents, Size bytes of the
// response's data in order, follow when Data is set.
type FileData struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	Data bool   `json:"data"`
}

// Statfs is the workspace's filesystem.
type Statfs struct {
	BlockSize int64  `json:"bsize"`
	Blocks    uint64 `json:"blocks"`
	Avail     uint64 `json:"avail"` // blocks free to an unprivileged user
	Files     uint64 `json:"files"`
	FilesFree uint64 `json:"ffree"`
}

// Response answers a Request; read and readdir carry their bytes as the
// frame's data.
type Response struct {
	Code    Code       `json:"code"`
	Error   string     `json:"error,omitempty"`
	Entries []Entry    `json:"entries,omitempty"`
	More    bool       `json:"more,omitempty"`
	Files   []FileData `json:"files,omitempty"`
	Size    int64      `json:"size,omitempty"`
	Statfs  *Statfs    `json:"statfs,omitempty"`
	Logs    *Logs      `json:"logs,omitempty"`
}

// Logs describes the data of an OpLogs answer.
type Logs struct {
	StdoutTotal int64 `json:"stdout_total"`
	StderrTotal int64 `json:"stderr_total"`
	Stdout      int64 `json:"stdout"` // the data's first Stdout bytes; stderr's follow
}

// MaxHeader bounds a frame's header: a listing of many entries with long
// paths (list's max is the core's, in the thousands).
const MaxHeader = 64 << 20

// WriteMsg writes one frame.
func WriteMsg(w io.Writer, header any, data []byte) error {
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	if len(h) > MaxHeader || int64(len(data)) > 1<<32-1 {
		return errors.New("a message over its bound")
	}
	buf := make([]byte, 8, 8+len(h))
	binary.BigEndian.PutUint32(buf[:4], uint32(len(h)))
	binary.BigEndian.PutUint32(buf[4:], uint32(len(data)))
	buf = append(buf, h...)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if len(data) > 0 {
		_, err = w.Write(data)
	}
	return err
}

// ReadMsg reads one frame into header, refusing data over maxData bytes
// before reading it. io.EOF: the stream ended between messages.
func ReadMsg(r io.Reader, header any, maxData int64) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	hl, dl := binary.BigEndian.Uint32(n[:4]), binary.BigEndian.Uint32(n[4:])
	if hl > MaxHeader || int64(dl) > maxData {
		return nil, fmt.Errorf("a message of %d+%d bytes, over its bound", hl, dl)
	}
	h := make([]byte, hl)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, unexpected(err)
	}
	if err := json.Unmarshal(h, header); err != nil {
		return nil, fmt.Errorf("a malformed message: %w", err)
	}
	data := make([]byte, dl)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, unexpected(err)
	}
	return data, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Frames of the socket relay (listen) between the pod and the core: a
// type byte, the connection's number and the length of the data that
// follows (big-endian uint32s). From the pod: R (all sockets listen), O
// (a connection opened; data: the listener's index as a uint32), D
// (data), E (the sandbox closed its writing half), C (gone). To the pod:
// D, E (the core's end closed its writing half), C (close it).
const (
	FrameReady = 'R'
	FrameOpen  = 'O'
	FrameData  = 'D'
	FrameEOF   = 'E'
	FrameClose = 'C'
)

// FrameHeader is a relay frame's header size.
const FrameHeader = 9

// MaxFrame bounds a relay frame's data: the relay reads 64 KiB at a time.
const MaxFrame = 1 << 20

// Frame is one relay frame.
type Frame struct {
	Type byte
	Conn uint32
	Data []byte
}

// WriteFrame writes f in one Write (callers serialise writers).
func WriteFrame(w io.Writer, f Frame) error {
	b := make([]byte, FrameHeader, FrameHeader+len(f.Data))
	b[0] = f.Type
	binary.BigEndian.PutUint32(b[1:5], f.Conn)
	binary.BigEndian.PutUint32(b[5:], uint32(len(f.Data)))
	_, err := w.Write(append(b, f.Data...))
	return err
}

// ReadFrame reads one frame, refusing one over MaxFrame.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [FrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[5:])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("a relay frame of %d bytes", n)
	}
	f := Frame{Type: h[0], Conn: binary.BigEndian.Uint32(h[1:5]), Data: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return Frame{}, unexpected(err)
	}
	return f, nil
}
