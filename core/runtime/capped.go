package runtime

import (
	"bytes"
	"io"
)

// Capped keeps the first Max bytes written to it and counts them all: a
// command's stream, of which a result carries a bounded part and the total.
type Capped struct {
	Max   int64
	Buf   bytes.Buffer
	Total int64
}

func (c *Capped) Write(p []byte) (int, error) {
	c.Total += int64(len(p))
	if room := c.Max - int64(c.Buf.Len()); room > 0 {
		if int64(len(p)) > room {
			c.Buf.Write(p[:room])
		} else {
			c.Buf.Write(p)
		}
	}
	return len(p), nil
}

// ExecStreams are the capped stdout and stderr of an exec, and the writers
// to give the engine: each also feeds the request's own writer, if set.
func ExecStreams(req ExecRequest) (out, errw *Capped, ow, ew io.Writer) {
	out, errw = &Capped{Max: req.Max}, &Capped{Max: req.Max}
	ow, ew = out, errw
	if req.Stdout != nil {
		ow = io.MultiWriter(out, req.Stdout)
	}
	if req.Stderr != nil {
		ew = io.MultiWriter(errw, req.Stderr)
	}
	return out, errw, ow, ew
}

// OutputOf is what two capped streams kept, and their totals.
func OutputOf(out, errw *Capped) Output {
	return Output{Stdout: out.Buf.Bytes(), Stderr: errw.Buf.Bytes(), StdoutTotal: out.Total, StderrTotal: errw.Total}
}
