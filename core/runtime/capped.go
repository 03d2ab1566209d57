package runtime

import "bytes"

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
