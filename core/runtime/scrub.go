package runtime

import (
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Redacted replaces a scrubbed secret.
const Redacted = "[redacted]"

// minSecret is the shortest text that is scrubbed: shorter values (a
// backend's "/tmp", "Agg", "C.UTF-8") are no secrets and would mangle every
// message they occur in, paths above all.
const minSecret = 8

// Scrubber removes a container's environment from text: engines echo it in
// errors (runc prints "NAME=value" for a value holding a NUL byte), and
// neither errors, logs nor the audit log may carry it.
type Scrubber struct {
	r *strings.Replacer
}

// NewScrubber scrubs the values of env, as they are and as Go or JSON
// quoting prints them, and each printable run inside a value; with
// names set it scrubs the names too (for the audit log, where a name may
// itself be a secret).
func NewScrubber(env map[string]string, names bool) *Scrubber {
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= minSecret {
			seen[s] = true
		}
	}
	for k, v := range env {
		add(v)
		q := strconv.Quote(v)
		add(q[1 : len(q)-1])
		if j, err := json.Marshal(v); err == nil {
			add(string(j[1 : len(j)-1]))
		}
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
			add(part)
		}
		if names {
			add(k)
		}
	}
	if len(seen) == 0 {
		return &Scrubber{}
	}
	// Longest first, so that a value is replaced whole before its pieces.
	list := make([]string, 0, len(seen))
	for s := range seen {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool {
		return len(list[i]) > len(list[j]) || len(list[i]) == len(list[j]) && list[i] < list[j]
	})
	pairs := make([]string, 0, 2*len(list))
	for _, s := range list {
		pairs = append(pairs, s, Redacted)
	}
	return &Scrubber{r: strings.NewReplacer(pairs...)}
}

// String returns s without the secrets.
func (s *Scrubber) String(text string) string {
	if s == nil || s.r == nil {
		return text
	}
	return s.r.Replace(text)
}

// Error returns err with a scrubbed message. An error whose text held a
// secret comes back as a new error without a chain: errors.As could
// otherwise hand the original, and its text, to whoever asks. Nil stays nil;
// an error without secrets is returned as is, chain and all.
func (s *Scrubber) Error(err error) error {
	if err == nil || s == nil || s.r == nil {
		return err
	}
	msg := err.Error()
	clean := s.r.Replace(msg)
	if clean == msg {
		return err
	}
	return errors.New(clean)
}
