package credential

import (
	"io"
	"net/http"
)

// Writer passes a response body on with a credential's value replaced by
// its placeholder, holding back only a tail that may be the start of a
// value (so a stream is not delayed otherwise). Flush writes the rest when
// the body ends.
type Writer struct {
	w   io.Writer
	g   *Granted
	buf []byte
}

// NewWriter scrubs what it writes to w of g's value.
func NewWriter(w io.Writer, g *Granted) *Writer { return &Writer{w: w, g: g} }

func (s *Writer) Write(b []byte) (int, error) {
	s.buf = s.g.Scrub(append(s.buf, b...))
	keep := 0
	for _, f := range s.g.forms {
		for k := min(len(f)-1, len(s.buf)); k > keep; k-- {
			if string(s.buf[len(s.buf)-k:]) == string(f[:k]) {
				keep = k
				break
			}
		}
	}
	if n := len(s.buf) - keep; n > 0 {
		if _, err := s.w.Write(s.buf[:n]); err != nil {
			return 0, err
		}
		s.buf = append(s.buf[:0], s.buf[n:]...)
		if f, ok := s.w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return len(b), nil
}

// Flush writes what was held back: the body ended without the rest of a
// value.
func (s *Writer) Flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	_, err := s.w.Write(s.buf)
	s.buf = nil
	return err
}
