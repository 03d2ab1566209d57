package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

var fuzzKey = []byte("5f0d3c7e-fuzz-key")

// wireMode bits steer the fuzzer between well-formed and broken messages so
// that both the signature check and what lies behind it are reached.
const (
	modeSign       = 1 << iota // put the correct signature in the signature frame
	modeNoDelim                // leave out the <IDS|MSG> delimiter
	modeShort                  // drop the last frame
	modeBuffers                // append a binary buffer frame
	modeDelimInIDs             // an identity frame equal to the delimiter
	modeSplitIDs               // identities are ids split on '\n'
	modeFlipSig                // change one byte of the correct signature
	modeRaw                    // ignore the rest: frames are ids split on 0xff 0x00
)

func hmacHex(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

func buildFrames(ids, sig, h, p, md, content []byte, mode byte) [][]byte {
	if mode&modeRaw != 0 {
		return bytes.Split(ids, []byte{0xff, 0x00})
	}
	var frames [][]byte
	switch {
	case mode&modeSplitIDs != 0:
		frames = append(frames, bytes.Split(ids, []byte("\n"))...)
	case len(ids) > 0:
		frames = append(frames, ids)
	}
	if mode&modeDelimInIDs != 0 {
		frames = append(frames, []byte(delimiter))
	}
	if mode&modeSign != 0 {
		sig = hmacHex(fuzzKey, h, p, md, content)
		if mode&modeFlipSig != 0 && len(ids) > 0 {
			sig[int(ids[0])%len(sig)] ^= 1 + ids[len(ids)-1]%0x7f
		}
	}
	if mode&modeNoDelim == 0 {
		frames = append(frames, []byte(delimiter))
	}
	frames = append(frames, sig, h, p, md, content)
	if mode&modeBuffers != 0 {
		frames = append(frames, []byte("\x00buffer"))
	}
	if mode&modeShort != 0 {
		frames = frames[:len(frames)-1]
	}
	return frames
}

// FuzzDecode: the wire-message parser never panics, never accepts a message
// whose HMAC-SHA256 over header, parent, metadata and content does not match
// its signature frame (a bad signature is reported as ErrBadSignature, which
// the client counts), always accepts a correctly signed message with a valid
// header, and returns exactly what was signed.
func FuzzDecode(f *testing.F) {
	s := signer{key: fuzzKey}
	f.Fuzz(func(t *testing.T, ids, sig, h, p, md, content []byte, mode byte) {
		frames := buildFrames(ids, sig, h, p, md, content, mode)
		// What the parser should see, computed independently of it.
		i := 0
		for i < len(frames) && string(frames[i]) != delimiter {
			i++
		}
		wellFormed := len(frames)-i >= 6
		var signedOK, headerOK bool
		var want Header
		if wellFormed {
			signedOK = hmac.Equal(frames[i+1], hmacHex(fuzzKey, frames[i+2:i+6]...))
			headerOK = json.Unmarshal(frames[i+2], &want) == nil
		}

		m, err := s.decode(frames)
		if err != nil {
			switch {
			case wellFormed && !signedOK && !errors.Is(err, ErrBadSignature):
				t.Fatalf("bad signature reported as %v, not ErrBadSignature", err)
			case wellFormed && signedOK && headerOK:
				t.Fatalf("a correctly signed message was refused: %v", err)
			}
			return
		}
		if !wellFormed {
			t.Fatalf("accepted a malformed message of %d frames", len(frames))
		}
		if !signedOK {
			t.Fatalf("accepted a message with a bad signature %q", frames[i+1])
		}
		if !headerOK || m.Header != want {
			t.Fatalf("header %+v, want %+v", m.Header, want)
		}
		if !bytes.Equal(m.Content, frames[i+5]) {
			t.Fatalf("content %q, signed %q", m.Content, frames[i+5])
		}
		if len(m.Identities) != i || (i > 0 && !reflect.DeepEqual(m.Identities, frames[:i])) {
			t.Fatalf("identities %q, want %q", m.Identities, frames[:i])
		}
		// The content outlives the receive buffer it came from.
		if len(frames[i+5]) > 0 {
			before := string(m.Content)
			frames[i+5][0] ^= 0xff
			if string(m.Content) != before {
				t.Fatal("content aliases the frame buffer")
			}
		}
		if ev, ok := toEvent(m); ok {
			checkEventUTF8(t, ev)
		}

		// What we send, a kernel can verify: encode then decode is the identity.
		again, err := s.encode(m)
		if err != nil {
			return // metadata that JSON cannot re-encode (NaN is impossible here, but be safe)
		}
		back, err := s.decode(again)
		if err != nil || back.Header != m.Header || !bytes.Equal(back.Content, normalContent(m.Content)) {
			t.Fatalf("re-encoded message does not decode the same: %+v %v", back, err)
		}
	})
}

// normalContent is what encode sends for a content frame.
func normalContent(c []byte) []byte {
	if len(c) == 0 {
		return []byte("{}")
	}
	return c
}

func checkEventUTF8(t *testing.T, ev Event) {
	t.Helper()
	strs := []string{ev.Kind, ev.Name, ev.Text}
	if ev.Err != nil {
		strs = append(strs, ev.Err.EName, ev.Err.EValue)
		strs = append(strs, ev.Err.Traceback...)
	}
	for k, v := range ev.Meta {
		strs = append(strs, k, v)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			t.Fatalf("event %+v carries invalid UTF-8 %q", ev, s)
		}
	}
}
