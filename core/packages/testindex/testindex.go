// Package testindex serves a tiny PEP 503 "simple" package index on a
// loopback httptest server, for tests of package builders without PyPI. It
// writes its own pure-Python wheels (and one source distribution) with
// archive/zip and archive/tar, so every file and hash is known to the test.
package testindex

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Names in the default index, each for one behaviour a builder must show.
const (
	// ChainTop depends on ChainMiddle, which depends on ChainBottom>=2.
	ChainTop    = "forge-a"
	ChainMiddle = "forge-b"
	ChainBottom = "forge-c" // versions 1.0 and 2.0
	// Conflict needs ChainTop and ChainBottom<2: no version of ChainBottom
	// satisfies both it and ChainMiddle.
	Conflict = "forge-conflict"
	// SdistOnly has no wheel: refused under --only-binary, never fetched.
	SdistOnly = "forge-sdist-only"
	// Blocklisted is on the built-in blocklist (a 2018 typosquat of
	// colorama); the wheel served here is harmless.
	Blocklisted = "colourama"
	// NeedsApproval matches the default approval pattern "*-dev".
	NeedsApproval = "forge-tool-dev"
)

// Project is one release in the index.
type Project struct {
	Name      string
	Version   string
	Requires  []string // Requires-Dist lines
	SdistOnly bool
	// Extras are optional features: Provides-Extra, and each extra's
	// requirements as Requires-Dist lines with the marker extra == "<name>".
	Extras map[string][]string
	// Payload, when > 0, adds <module>/payload.bin of that many zero bytes,
	// deflated: a wheel of about Payload/1000 bytes that unpacks to Payload
	// (a decompression bomb).
	Payload int64
}

// DefaultProjects is the index New serves when given none.
func DefaultProjects() []Project {
	return []Project{
		{Name: ChainTop, Version: "1.0", Requires: []string{ChainMiddle}},
		{Name: ChainMiddle, Version: "1.0", Requires: []string{ChainBottom + ">=2"}},
		{Name: ChainBottom, Version: "1.0"},
		{Name: ChainBottom, Version: "2.0"},
		{Name: Conflict, Version: "1.0", Requires: []string{ChainTop, ChainBottom + "<2"}},
		{Name: SdistOnly, Version: "1.0", SdistOnly: true},
		{Name: Blocklisted, Version: "0.1"},
		{Name: NeedsApproval, Version: "0.1"},
	}
}

// Index is a running index.
type Index struct {
	// URL is the index root to pass as --default-index: http://127.0.0.1:PORT/simple
	URL    string
	server *httptest.Server

	files  map[string][]byte // "/files/<filename>" → content
	pages  map[string][]byte // "/simple/" and "/simple/<name>/" → HTML
	hashes map[string]string // filename → sha256 hex

	mu   sync.Mutex
	hits map[string]int
}

// New builds the files for projects (DefaultProjects when nil) and serves
// them until the test ends.
func New(t testing.TB, projects []Project) *Index {
	t.Helper()
	if projects == nil {
		projects = DefaultProjects()
	}
	ix := &Index{files: map[string][]byte{}, pages: map[string][]byte{}, hashes: map[string]string{}, hits: map[string]int{}}
	links := map[string][]string{} // normalised name → filenames
	for _, p := range projects {
		var (
			name string
			data []byte
			err  error
		)
		if p.SdistOnly {
			name, data, err = Sdist(p.Name, p.Version)
		} else {
			name, data, err = WheelOf(p)
		}
		if err != nil {
			t.Fatalf("testindex: building %s %s: %v", p.Name, p.Version, err)
		}
		sum := sha256.Sum256(data)
		ix.files["/files/"+name] = data
		ix.hashes[name] = hex.EncodeToString(sum[:])
		key := normalize(p.Name)
		links[key] = append(links[key], name)
	}
	var root strings.Builder
	root.WriteString("<!DOCTYPE html>\n<html><body>\n")
	for _, key := range sortedKeys(links) {
		fmt.Fprintf(&root, "<a href=\"/simple/%s/\">%s</a><br/>\n", key, key)
		var page strings.Builder
		fmt.Fprintf(&page, "<!DOCTYPE html>\n<html><head><title>Links for %s</title></head><body>\n", key)
		for _, f := range links[key] {
			fmt.Fprintf(&page, "<a href=\"/files/%s#sha256=%s\">%s</a><br/>\n", f, ix.hashes[f], html.EscapeString(f))
		}
		page.WriteString("</body></html>\n")
		ix.pages["/simple/"+key+"/"] = []byte(page.String())
	}
	root.WriteString("</body></html>\n")
	ix.pages["/simple/"] = []byte(root.String())

	ix.server = httptest.NewServer(http.HandlerFunc(ix.serve))
	t.Cleanup(ix.server.Close)
	ix.URL = ix.server.URL + "/simple"
	return ix
}

func (ix *Index) serve(w http.ResponseWriter, r *http.Request) {
	ix.mu.Lock()
	ix.hits[r.URL.Path]++
	ix.mu.Unlock()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "read-only index", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if strings.HasPrefix(p, "/simple/") && !strings.HasSuffix(p, "/") {
		http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
		return
	}
	if page, ok := ix.pages[p]; ok {
		w.Header().Set("Content-Type", "text/html")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(page))
		return
	}
	if data, ok := ix.files[p]; ok {
		// ServeContent answers Range requests, which resolvers use to read a
		// wheel's METADATA without downloading all of it.
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, p, time.Time{}, bytes.NewReader(data))
		return
	}
	http.NotFound(w, r)
}

// Hits is how many requests reached path, e.g. "/files/<filename>".
func (ix *Index) Hits(path string) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.hits[path]
}

// SHA256 is the hex sha256 of a served file, by filename.
func (ix *Index) SHA256(filename string) string { return ix.hashes[filename] }

// Files lists the served filenames.
func (ix *Index) Files() []string { return sortedKeys(ix.hashes) }

// WheelName is the file name of a pure-Python wheel (PEP 427): the name with
// runs of '-', '_' and '.' as one '_'.
func WheelName(name, version string) string {
	return distName(name) + "-" + version + "-py3-none-any.whl"
}

// SdistName is the file name of a source distribution.
func SdistName(name, version string) string {
	return distName(name) + "-" + version + ".tar.gz"
}

// Wheel writes a pure-Python wheel whose module (the name with '_') sets
// __version__. Its bytes are the same on every call.
func Wheel(name, version string, requires []string) (string, []byte, error) {
	return WheelOf(Project{Name: name, Version: version, Requires: requires})
}

// WheelOf writes the wheel of p (Wheel, with p's extras and payload).
func WheelOf(p Project) (string, []byte, error) {
	name, version := p.Name, p.Version
	dist := distName(name)
	info := dist + "-" + version + ".dist-info/"
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: MCP-Forge test package\n", name, version)
	for _, r := range p.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	for _, e := range sortedKeys(p.Extras) {
		meta += "Provides-Extra: " + e + "\n"
		for _, r := range p.Extras[e] {
			meta += fmt.Sprintf("Requires-Dist: %s ; extra == %q\n", r, e)
		}
	}
	files := []struct{ path, body string }{
		{dist + "/__init__.py", fmt.Sprintf("__version__ = %q\n", version)},
		{info + "METADATA", meta},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: mcp-forge-testindex\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(path, body string) error {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: path, Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return err
		}
		_, err = w.Write([]byte(body))
		return err
	}
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
		if err := add(f.path, f.body); err != nil {
			return "", nil, err
		}
	}
	if p.Payload > 0 {
		path := dist + "/payload.bin"
		w, err := zw.CreateHeader(&zip.FileHeader{Name: path, Method: zip.Deflate, Modified: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return "", nil, err
		}
		h := sha256.New()
		zeros := make([]byte, 1<<20)
		for left := p.Payload; left > 0; left -= int64(len(zeros)) {
			chunk := zeros[:min(left, int64(len(zeros)))]
			h.Write(chunk)
			if _, err := w.Write(chunk); err != nil {
				return "", nil, err
			}
		}
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", path, base64.RawURLEncoding.EncodeToString(h.Sum(nil)), p.Payload)
	}
	record.WriteString(info + "RECORD,,\n")
	if err := add(info+"RECORD", record.String()); err != nil {
		return "", nil, err
	}
	if err := zw.Close(); err != nil {
		return "", nil, err
	}
	return WheelName(name, version), buf.Bytes(), nil
}

// Sdist writes a source distribution whose build would fail loudly: a
// builder that only installs wheels must never fetch it.
func Sdist(name, version string) (string, []byte, error) {
	dir := distName(name) + "-" + version + "/"
	files := []struct{ path, body string }{
		{dir + "PKG-INFO", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version)},
		{dir + "pyproject.toml", "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n"},
		{dir + "backend.py", "raise SystemExit('mcp-forge testindex: this sdist must never be built')\n"},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{Name: f.path, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", nil, err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return "", nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return "", nil, err
	}
	if err := gz.Close(); err != nil {
		return "", nil, err
	}
	return SdistName(name, version), buf.Bytes(), nil
}

// normalize is PEP 503's name normalisation (core/packages.NormalizeName;
// repeated here so the helper has no dependencies on what it tests).
func normalize(name string) string {
	var b strings.Builder
	sep := false
	for _, c := range strings.ToLower(name) {
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		b.WriteRune(c)
	}
	return b.String()
}

func distName(name string) string { return strings.ReplaceAll(normalize(name), "-", "_") }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
