package sanitize

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Checked is an image that may be handed to a client.
type Checked struct {
	MIMEType string
	Data     []byte
	// Removed names the active content taken out of an SVG ("<script>
	// element", "onload attribute", ...); empty when nothing was.
	Removed []string
}

var rasters = []struct{ mime, magic, name string }{
	{"image/png", "\x89PNG\r\n\x1a\n", "PNG"},
	{"image/jpeg", "\xff\xd8\xff", "JPEG"},
	{"image/gif", "GIF87a", "GIF"},
	{"image/gif", "GIF89a", "GIF"},
}

// Image checks an image before it goes to a client: a raster image must be
// what its bytes say it is (its type is taken from its content), and an SVG
// is returned only sanitised (see SVG). Anything else is an error saying
// why it is not an image.
func Image(mime string, data []byte) (Checked, error) {
	for _, r := range rasters {
		if bytes.HasPrefix(data, []byte(r.magic)) {
			return Checked{MIMEType: r.mime, Data: data}, nil
		}
	}
	switch mime {
	case "image/svg+xml":
		clean, removed, err := SVG(data)
		if err != nil {
			return Checked{}, err
		}
		return Checked{MIMEType: mime, Data: clean, Removed: removed}, nil
	case "image/png", "image/jpeg", "image/gif":
		for _, r := range rasters {
			if r.mime == mime {
				return Checked{}, fmt.Errorf("its content is not a %s image (no %s signature)", r.name, r.name)
			}
		}
	}
	return Checked{}, fmt.Errorf("%q is not an image type returned to clients (PNG, JPEG, GIF, SVG)", mime)
}

// Elements dropped with everything inside them: scripts, embedded HTML and
// other documents, and SVG Tiny's event handlers.
var dropElements = map[string]bool{
	"script": true, "foreignobject": true, "handler": true, "listener": true,
	"iframe": true, "frame": true, "frameset": true, "embed": true, "object": true, "applet": true,
	"base": true, "link": true, "meta": true, "audio": true, "video": true, "form": true,
}

// Attributes whose value is a URL the client would fetch or follow.
var urlAttrs = map[string]bool{
	"href": true, "src": true, "srcset": true, "action": true, "formaction": true, "data": true,
	"poster": true, "background": true, "codebase": true, "ping": true, "lowsrc": true, "dynsrc": true,
}

// Animation elements can rewrite another element's attributes (an href
// to javascript:, an event handler), so those that target such an
// attribute go too.
var animations = map[string]bool{"set": true, "animate": true, "animatetransform": true, "animatemotion": true, "animatecolor": true}

// SVG returns data with its active content removed: <script>,
// <foreignObject> and other embedded documents, on* event attributes,
// href/src references that are not to the document itself (#id) or an
// embedded raster image (data:image/png, jpeg, gif), javascript: and other
// script URLs anywhere, external url(...) references and @import in CSS,
// animations that rewrite references or handlers, comments, processing
// instructions and <!DOCTYPE>/<!ENTITY> declarations (entities are never
// expanded). It parses with encoding/xml: a document that is not
// well-formed XML with an <svg> root is an error, never returned as is.
func SVG(data []byte) ([]byte, []string, error) {
	s := svgSanitizer{d: xml.NewDecoder(bytes.NewReader(data)), removed: map[string]bool{}}
	s.d.Strict = true
	out, err := s.run()
	if err != nil {
		return nil, nil, fmt.Errorf("the SVG could not be parsed safely: %w", err)
	}
	removed := make([]string, 0, len(s.removed))
	for r := range s.removed {
		removed = append(removed, r)
	}
	sort.Strings(removed)
	return out, removed, nil
}

type svgSanitizer struct {
	d        *xml.Decoder
	out      bytes.Buffer
	stack    []string // open elements' qualified names
	skip     int      // > 0: inside a dropped element, at this stack depth
	removed  map[string]bool
	root     bool
	style    *bytes.Buffer // collecting a <style> element's text
	styleAt  int           // its depth
	styleTag string        // its start tag, written once the text is known safe
}

func qname(n xml.Name) string {
	if n.Space == "" {
		return n.Local
	}
	return n.Space + ":" + n.Local
}

// local is the lower-cased local part of a name, whatever its prefix: a
// check that an HTML parser would match case-insensitively must too.
func local(n xml.Name) string {
	l := strings.ToLower(n.Local)
	if i := strings.LastIndexByte(l, ':'); i >= 0 {
		l = l[i+1:]
	}
	return l
}

func (s *svgSanitizer) run() ([]byte, error) {
	for {
		tok, err := s.d.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if err := s.start(t); err != nil {
				return nil, err
			}
		case xml.EndElement:
			if err := s.end(t); err != nil {
				return nil, err
			}
		case xml.CharData:
			if len(s.stack) == 0 {
				if len(bytes.TrimSpace(t)) > 0 {
					return nil, errors.New("text outside the <svg> element")
				}
				continue
			}
			switch {
			case s.skip > 0:
			case s.style != nil:
				s.style.Write(t)
			default:
				escapeText(&s.out, t)
			}
		case xml.Comment:
			// Comments carry nothing an image needs, and old parsers
			// disagree on where they end.
		case xml.ProcInst:
			if t.Target != "xml" {
				s.removed["<?"+t.Target+"?> instruction"] = true
			}
		case xml.Directive:
			s.removed["<!DOCTYPE>/<!ENTITY> declaration"] = true
		}
	}
	if !s.root {
		return nil, errors.New("no <svg> element")
	}
	if len(s.stack) > 0 {
		return nil, fmt.Errorf("element <%s> is not closed", s.stack[len(s.stack)-1])
	}
	return s.out.Bytes(), nil
}

func (s *svgSanitizer) start(t xml.StartElement) error {
	name := qname(t.Name)
	if len(s.stack) == 0 {
		if s.root {
			return errors.New("more than one root element")
		}
		if t.Name.Local != "svg" {
			return fmt.Errorf("the root element is <%s>, not <svg>", name)
		}
		s.root = true
	}
	s.stack = append(s.stack, name)
	if s.skip > 0 {
		return nil
	}
	l := local(t.Name)
	drop := dropElements[l]
	if !drop && animations[l] {
		for _, a := range t.Attr {
			if strings.EqualFold(a.Name.Local, "attributeName") {
				target := strings.ToLower(strings.TrimSpace(a.Value))
				if i := strings.LastIndexByte(target, ':'); i >= 0 {
					target = target[i+1:]
				}
				drop = target == "href" || target == "src" || target == "style" || strings.HasPrefix(target, "on")
			}
		}
	}
	if s.style != nil {
		drop = true // markup inside <style> is not CSS
		s.removed["<style> element with markup"] = true
		s.style = nil
		s.skip = s.styleAt
		return nil
	}
	if drop {
		s.removed["<"+t.Name.Local+"> element"] = true
		s.skip = len(s.stack)
		return nil
	}
	var attrs bytes.Buffer
	for _, a := range t.Attr {
		if why := unsafeAttr(a); why != "" {
			s.removed[why] = true
			continue
		}
		attrs.WriteByte(' ')
		attrs.WriteString(qname(a.Name))
		attrs.WriteString(`="`)
		escapeAttr(&attrs, a.Value)
		attrs.WriteByte('"')
	}
	if l == "style" {
		// Held back until its text is known to be harmless CSS.
		s.style, s.styleAt = &bytes.Buffer{}, len(s.stack)
		s.styleTag = "<" + name + attrs.String() + ">"
		return nil
	}
	s.out.WriteString("<" + name)
	s.out.Write(attrs.Bytes())
	s.out.WriteByte('>')
	return nil
}

func (s *svgSanitizer) end(t xml.EndElement) error {
	name := qname(t.Name)
	if len(s.stack) == 0 || s.stack[len(s.stack)-1] != name {
		return fmt.Errorf("unexpected </%s>", name)
	}
	depth := len(s.stack)
	s.stack = s.stack[:depth-1]
	switch {
	case s.skip > 0:
		if depth == s.skip {
			s.skip = 0
		}
	case s.style != nil && depth == s.styleAt:
		css := s.style.Bytes()
		s.style = nil
		if why := unsafeCSS(string(css)); why != "" {
			s.removed["<style> element with "+why] = true
			return nil
		}
		s.out.WriteString(s.styleTag)
		escapeText(&s.out, css)
		s.out.WriteString("</" + name + ">")
	default:
		s.out.WriteString("</" + name + ">")
	}
	return nil
}

// squash lower-cases v and removes whitespace and control characters,
// which browsers ignore inside a URL scheme ("java\tscript:").
func squash(v string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return -1
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, v)
}

var scriptSchemes = []string{"javascript:", "vbscript:", "livescript:", "data:text/html", "data:application/xhtml", "data:image/svg"}

// safeRef reports whether a reference stays inside the document or is an
// embedded raster image.
func safeRef(v string) bool {
	v = squash(v)
	if strings.HasPrefix(v, "#") {
		return true
	}
	for _, p := range []string{"data:image/png", "data:image/jpeg", "data:image/jpg", "data:image/gif"} {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// unsafeAttr says why an attribute must go, or "".
func unsafeAttr(a xml.Attr) string {
	l := local(a.Name)
	switch {
	case a.Name.Space == "xmlns" || (a.Name.Space == "" && a.Name.Local == "xmlns"):
		return "" // a namespace name is never fetched
	case strings.HasPrefix(l, "on"):
		return l + " attribute"
	case urlAttrs[l]:
		if !safeRef(a.Value) {
			return "external or script " + l + " reference"
		}
	case l == "base" && a.Name.Space == "xml":
		return "xml:base attribute"
	case l == "style":
		if why := unsafeCSS(a.Value); why != "" {
			return why + " in a style attribute"
		}
	}
	v := squash(a.Value)
	for _, p := range scriptSchemes {
		if strings.Contains(v, p) {
			return "script URL in a " + l + " attribute"
		}
	}
	// Presentation attributes (fill, clip-path, filter, ...) take url().
	if why := externalURL(v); why != "" {
		return why + " in a " + l + " attribute"
	}
	return ""
}

// externalURL says why squashed CSS or attribute text references something
// outside the document, or "".
func externalURL(v string) string {
	for rest := v; ; {
		i := strings.Index(rest, "url(")
		if i < 0 {
			return ""
		}
		rest = rest[i+len("url("):]
		if !safeRef(strings.TrimLeft(rest, `"'`)) {
			return "external url() reference"
		}
	}
}

// unsafeCSS says why CSS text must go, or "": it must not import or
// reference anything outside the document, nor run script.
func unsafeCSS(css string) string {
	v := squash(css)
	switch {
	case strings.Contains(v, "@import"):
		return "@import"
	case strings.Contains(v, "expression("), strings.Contains(v, "behavior:"), strings.Contains(v, "-moz-binding"):
		return "scripted CSS"
	}
	for _, p := range scriptSchemes {
		if strings.Contains(v, p) {
			return "script URL in CSS"
		}
	}
	if why := externalURL(v); why != "" {
		return why
	}
	// A CSS escape can spell any of the above (\75 rl, java\73 cript).
	if strings.Contains(v, `\`) {
		return "escaped CSS"
	}
	return ""
}

func escapeText(w *bytes.Buffer, b []byte) {
	for _, c := range b {
		switch c {
		case '&':
			w.WriteString("&amp;")
		case '<':
			w.WriteString("&lt;")
		case '>':
			w.WriteString("&gt;")
		default:
			w.WriteByte(c)
		}
	}
}

func escapeAttr(w *bytes.Buffer, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '&':
			w.WriteString("&amp;")
		case '<':
			w.WriteString("&lt;")
		case '"':
			w.WriteString("&quot;")
		case '\n':
			w.WriteString("&#xA;")
		case '\r':
			w.WriteString("&#xD;")
		case '\t':
			w.WriteString("&#x9;")
		default:
			w.WriteByte(c)
		}
	}
}
