package apps

import (
	"regexp"
	"strings"
	"testing"
)

// The page's CSP allows exactly its own inline style and script: a change
// to either that does not reach the hashes would leave a page that renders
// nothing, and a looser policy would let injected markup run.
func TestSessionPagePolicy(t *testing.T) {
	csp := regexp.MustCompile(`http-equiv="Content-Security-Policy" content="([^"]+)"`).FindStringSubmatch(SessionPage)
	if csp == nil {
		t.Fatal("no Content-Security-Policy in the page")
	}
	inline := func(tag string) [][]string {
		return regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(SessionPage, -1)
	}
	for _, c := range []struct{ tag, directive string }{{"style", "style-src"}, {"script", "script-src"}} {
		blocks := inline(c.tag)
		if len(blocks) != 1 {
			t.Fatalf("%d <%s> blocks; want 1", len(blocks), c.tag)
		}
		want := c.directive + " " + hash(blocks[0][1]) + ";"
		if !strings.Contains(csp[1], want) {
			t.Errorf("CSP %q lacks %q", csp[1], want)
		}
	}
	for _, d := range []string{"default-src 'none'", "img-src data:", "base-uri 'none'"} {
		if !strings.Contains(csp[1], d) {
			t.Errorf("CSP %q lacks %q", csp[1], d)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "{{"} {
		if strings.Contains(SessionPage, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
}

// Self-contained: nothing is fetched from anywhere (no CDN, no fonts), and
// nothing the session holds is parsed as HTML.
func TestSessionPageSelfContained(t *testing.T) {
	for _, re := range []string{`https?://`, `src="//`, `url\(`, `@import`, `innerHTML`, `outerHTML`, `insertAdjacentHTML`, `document\.write`, `eval\(`, `new Function`} {
		if m := regexp.MustCompile(re).FindString(SessionPage); m != "" {
			t.Errorf("the page holds %q", m)
		}
	}
}
