package sanitize

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

const svgOpen = `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="10" height="10">`

// wellFormed parses out as XML, start to end.
func wellFormed(t *testing.T, out []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(out))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("sanitised SVG is not well-formed: %v\n%s", err, out)
		}
	}
}

func TestSVGHostile(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		forbid  []string // must not appear in the output (compared lower-cased)
		keep    []string // must still appear
		removed string   // a word of the removal report
	}{
		{"script element", svgOpen + `<script>alert(1)</script><rect width="5" height="5"/></svg>`,
			[]string{"script", "alert"}, []string{"<rect"}, "<script>"},
		{"script in CDATA", svgOpen + `<script><![CDATA[alert(document.cookie)]]></script></svg>`,
			[]string{"script", "alert"}, nil, "<script>"},
		{"upper-case and prefixed scripts", `<svg:svg xmlns:svg="http://www.w3.org/2000/svg" xmlns:h="http://www.w3.org/1999/xhtml"><svg:SCRIPT>a()</svg:SCRIPT><h:script>b()</h:script><svg:rect/></svg:svg>`,
			[]string{"script", "a()", "b()"}, []string{"<svg:rect"}, "script"},
		{"onload on the root", `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)" width="3"><g onClick="x()" ONMOUSEOVER="y()"/></svg>`,
			[]string{"onload", "onclick", "onmouseover", "alert", "x()"}, []string{`width="3"`, "<g"}, "onload attribute"},
		{"foreignObject with HTML", svgOpen + `<foreignObject width="9" height="9"><body xmlns="http://www.w3.org/1999/xhtml"><iframe src="http://evil/"></iframe><img src="x" onerror="alert(1)"/></body></foreignObject><circle r="2"/></svg>`,
			[]string{"foreignobject", "iframe", "onerror", "evil", "<body"}, []string{"<circle"}, "<foreignObject>"},
		{"javascript href", svgOpen + `<a href="javascript:alert(1)"><text>click</text></a></svg>`,
			[]string{"javascript", "alert"}, []string{"<a>", "click"}, "href"},
		{"entity-obfuscated javascript xlink:href", svgOpen + `<a xlink:href="  jav&#x09;a&#x0A;script&#58;alert(1)"><text>x</text></a></svg>`,
			[]string{"script", "alert"}, []string{"<text>x</text>"}, "href"},
		{"external image and use", svgOpen + `<image href="http://evil.example/track.png" width="1"/><use xlink:href="https://evil.example/sprite.svg#a"/><use xlink:href="#a"/></svg>`,
			[]string{"evil.example"}, []string{`xlink:href="#a"`, `width="1"`}, "href"},
		{"embedded SVG and HTML data URLs", svgOpen + `<image href="data:image/svg+xml;base64,PHN2Zz4="/><a href="data:text/html,&lt;script&gt;"/></svg>`,
			[]string{"data:image/svg", "data:text/html"}, nil, "href"},
		{"embedded PNG is kept", svgOpen + `<image xlink:href="data:image/png;base64,iVBORw0KGgo=" width="2"/></svg>`,
			nil, []string{`xlink:href="data:image/png;base64,iVBORw0KGgo="`}, ""},
		{"set rewrites an href", svgOpen + `<a href="#x"><set attributeName="href" to="javascript:alert(1)"/><animate attributeName="xlink:href" values="http://evil/"/><text>t</text></a></svg>`,
			[]string{"<set", "<animate", "javascript", "evil"}, []string{`href="#x"`, "<text>t</text>"}, "<set>"},
		{"set adds a handler", svgOpen + `<rect><set attributeName="onmouseover" to="alert(1)"/></rect><circle><animate attributeName="r" from="1" to="2"/></circle></svg>`,
			[]string{"onmouseover", "alert", "<set"}, []string{`<animate attributeName="r"`}, "<set>"},
		{"doctype without entities", `<?xml version="1.0" encoding="utf-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
` + svgOpen + `<rect/></svg>`,
			[]string{"doctype", "dtd"}, []string{"<rect>"}, "DOCTYPE"},
		{"stylesheet instruction", `<?xml-stylesheet href="http://evil/x.css" type="text/css"?>` + svgOpen + `<rect/></svg>`,
			[]string{"evil", "stylesheet"}, []string{"<rect>"}, "xml-stylesheet"},
		{"style @import", svgOpen + `<style>@import url(http://evil/x.css);</style><rect/></svg>`,
			[]string{"evil", "@import", "<style"}, []string{"<rect>"}, "<style>"},
		{"style external url", svgOpen + `<style>rect { fill: url('http://evil/p.svg#g') }</style></svg>`,
			[]string{"evil", "<style"}, nil, "<style>"},
		{"style escape", svgOpen + `<style>rect { background: \75 rl(http://evil) }</style></svg>`,
			[]string{"evil", "<style"}, nil, "<style>"},
		{"style with markup", svgOpen + `<style>a{}<script>alert(1)</script></style><rect/></svg>`,
			[]string{"script", "alert", "<style"}, []string{"<rect>"}, "<style>"},
		{"harmless style is kept", svgOpen + `<defs><style type="text/css">*{stroke-linejoin: round; stroke-linecap: butt} a>b{fill:url(#g)}</style></defs></svg>`,
			nil, []string{`<style type="text/css">*{stroke-linejoin: round; stroke-linecap: butt} a&gt;b{fill:url(#g)}</style>`}, ""},
		{"style attribute", svgOpen + `<rect style="fill: url(javascript:alert(1))"/><circle style="fill: #fff; stroke: url(#p)"/></svg>`,
			[]string{"javascript", "alert"}, []string{`style="fill: #fff; stroke: url(#p)"`}, "style attribute"},
		{"presentation url", svgOpen + `<rect fill="url(http://evil/g.svg#g)" clip-path="url(#c)"/></svg>`,
			[]string{"evil"}, []string{`clip-path="url(#c)"`}, "fill attribute"},
		{"xml:base", svgOpen + `<g xml:base="http://evil/"><use xlink:href="#a"/></g></svg>`,
			[]string{"evil", "xml:base"}, []string{`xlink:href="#a"`}, "xml:base"},
		{"comments go", svgOpen + `<!-- <script>alert(1)</script> --><rect/></svg>`,
			[]string{"script", "alert", "<!--"}, []string{"<rect>"}, ""},
		{"html elements in the svg namespace", svgOpen + `<iframe src="http://evil"/><embed src="x.swf"/><object data="x"/><meta http-equiv="refresh" content="0;url=http://evil"/><form action="http://evil"/></svg>`,
			[]string{"evil", "iframe", "embed", "object", "meta", "form", "x.swf"}, nil, "<iframe>"},
		{"text is escaped", svgOpen + `<text>&lt;script&gt;alert(1)&lt;/script&gt; &amp; a</text></svg>`,
			[]string{"<script"}, []string{"&lt;script&gt;alert(1)&lt;/script&gt; &amp; a"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, removed, err := SVG([]byte(c.in))
			if err != nil {
				t.Fatalf("SVG: %v", err)
			}
			wellFormed(t, out)
			low := strings.ToLower(string(out))
			for _, f := range c.forbid {
				if strings.Contains(low, strings.ToLower(f)) {
					t.Errorf("output still holds %q:\n%s", f, out)
				}
			}
			for _, k := range c.keep {
				if !strings.Contains(string(out), k) {
					t.Errorf("output lost %q:\n%s", k, out)
				}
			}
			if c.removed != "" && !strings.Contains(strings.Join(removed, "; "), c.removed) {
				t.Errorf("removal report %q does not mention %q", removed, c.removed)
			}
			if c.removed == "" && len(removed) > 0 && !strings.Contains(c.name, "comments") {
				t.Errorf("nothing should be reported removed, got %q", removed)
			}
			again, removedAgain, err := SVG(out)
			if err != nil || !bytes.Equal(again, out) || len(removedAgain) > 0 {
				t.Errorf("not idempotent: %v %q\n%s\n%s", err, removedAgain, out, again)
			}
		})
	}
}

func TestSVGRefused(t *testing.T) {
	cases := []struct{ name, in, why string }{
		{"external entity", `<!DOCTYPE svg [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>` + svgOpen + `<text>&xxe;</text></svg>`, "entity"},
		{"billion laughs", `<!DOCTYPE svg [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]>` + svgOpen + `<text>&b;</text></svg>`, "entity"},
		{"not xml", `<svg><rect></svg>`, "unexpected"},
		{"unclosed", svgOpen + `<g>`, "not closed"},
		{"html root", `<html><script>alert(1)</script></html>`, "not <svg>"},
		{"no root", `   `, "no <svg>"},
		{"two roots", svgOpen + `</svg><svg></svg>`, "more than one root"},
		{"text outside", svgOpen + `</svg>trailing`, "outside"},
		{"other encoding", `<?xml version="1.0" encoding="ISO-8859-1"?>` + svgOpen + `</svg>`, "encoding"},
		{"invalid utf-8", svgOpen + "<text>\xff</text></svg>", "UTF-8"},
		{"html-style unquoted attribute", `<svg onload=alert(1)></svg>`, "unquoted"},
		{"double colon name", `<svg><a:b:script/></svg>`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := SVG([]byte(c.in))
			if err == nil {
				t.Fatalf("accepted:\n%s", out)
			}
			if !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "could not be parsed") {
				t.Errorf("error %q does not say %q", err, c.why)
			}
		})
	}
}

func TestImage(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nrest")
	cases := []struct {
		name, mime string
		data       []byte
		want       string // resulting MIME type; "" means refused
	}{
		{"png", "image/png", png, "image/png"},
		{"jpeg", "image/jpeg", []byte("\xff\xd8\xff\xe0rest"), "image/jpeg"},
		{"gif", "image/gif", []byte("GIF89a..."), "image/gif"},
		{"png named svg is a png", "image/svg+xml", png, "image/png"},
		{"jpeg named png is a jpeg", "image/png", []byte("\xff\xd8\xffrest"), "image/jpeg"},
		{"svg named png", "image/png", []byte(svgOpen + `<script>alert(1)</script></svg>`), ""},
		{"html named gif", "image/gif", []byte("<html><script>alert(1)</script>"), ""},
		{"svg", "image/svg+xml", []byte(svgOpen + `<script>alert(1)</script></svg>`), "image/svg+xml"},
		{"broken svg", "image/svg+xml", []byte(`<svg><script>`), ""},
		{"unknown type", "text/html", []byte("<b>hi</b>"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Image(c.mime, c.data)
			if c.want == "" {
				if err == nil {
					t.Fatalf("accepted as %s", got.MIMEType)
				}
				return
			}
			if err != nil || got.MIMEType != c.want {
				t.Fatalf("got %q, %v; want %s", got.MIMEType, err, c.want)
			}
			if strings.Contains(string(got.Data), "script") {
				t.Errorf("active content returned: %s", got.Data)
			}
		})
	}
}
