package files

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/egress/proxy"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// origin is the server of URL input files: per path a body and the
// validators and Cache-Control it answers with; it answers a conditional
// GET whose validator matches with 304, and counts what it was asked.
type origin struct {
	srv  *httptest.Server
	port string

	mu          sync.Mutex
	files       map[string]*originFile
	gets        int
	conditional int // GETs with If-None-Match or If-Modified-Since
	notModified int // answered 304
}

type originFile struct {
	body, etag, lastModified, cacheControl, vary string
}

func newOrigin(t *testing.T) *origin {
	o := &origin{files: map[string]*originFile{}}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.gets++
		f := o.files[r.URL.Path]
		if f == nil {
			http.NotFound(w, r)
			return
		}
		inm, ims := r.Header.Get("If-None-Match"), r.Header.Get("If-Modified-Since")
		if inm != "" || ims != "" {
			o.conditional++
		}
		h := w.Header()
		for k, v := range map[string]string{"ETag": f.etag, "Last-Modified": f.lastModified, "Cache-Control": f.cacheControl, "Vary": f.vary} {
			if v != "" {
				h.Set(k, v)
			}
		}
		if (f.etag != "" && inm == f.etag) || (f.etag == "" && f.lastModified != "" && ims == f.lastModified) {
			o.notModified++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, f.body)
	}))
	t.Cleanup(o.srv.Close)
	_, o.port, _ = net.SplitHostPort(o.srv.Listener.Addr().String())
	return o
}

func (o *origin) set(path string, f originFile) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.files[path] = &f
}

func (o *origin) counts() (gets, conditional, notModified int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gets, o.conditional, o.notModified
}

func (o *origin) url(path string) string { return "http://files.test:" + o.port + path }

// netRig is a rig whose engine grants files.test (the origin, on
// 127.0.0.1) through a real egress proxy, as the server wires it.
func netRig(t *testing.T, o *origin, mutate func(*config.Config)) *rig {
	t.Helper()
	r := newRig(t, func(c *config.Config) {
		c.Network.AllowedHosts = []string{"files.test:" + o.port}
		c.Network.AllowedCIDRs = []string{"127.0.0.1/32"}
		if mutate != nil {
			mutate(c)
		}
	}, func(r *enginerig.Rig) {
		r.Snake.Caps.InputFiles = true
		r.PM.Add("snake", r.Snake)
	})
	pol, err := egress.NewPolicy(r.Cfg.Network, nil, r.Rec)
	if err != nil {
		t.Fatal(err)
	}
	px := proxy.New(proxy.Options{Resolver: proxy.HostsResolver{Hosts: map[string]netip.Addr{"files.test": netip.MustParseAddr("127.0.0.1")}, Next: net.DefaultResolver},
		Log: hclog.NewNullLogger()})
	short, err := os.MkdirTemp("", "uc") // a unix socket's path is short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	chans, err := egress.NewChannels(px, filepath.Join(short, "net"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(chans.Close)
	r.E.SetNetwork(pol, chans)
	return r
}

// fetch fetches url for owner and returns the bytes and the details of
// the one file.fetch line it audited.
func (r *rig) fetch(t *testing.T, owner, url string) ([]byte, map[string]any) {
	t.Helper()
	before := len(r.fetches(t))
	data, err := r.e.Files.fetchInput(context.Background(), engine.Request{Client: owner, Language: "python"}, "execute_python", "input_files[0]", url)
	if err != nil {
		t.Fatalf("%s fetches %s: %v", owner, url, err)
	}
	after := r.fetches(t)
	if len(after) != before+1 {
		t.Fatalf("%s fetches %s: %d file.fetch lines, want one more than %d", owner, url, len(after), before)
	}
	return data, after[len(after)-1].Details
}

func (r *rig) fetches(t *testing.T) []audit.Entry {
	var out []audit.Entry
	for _, e := range r.Audit() {
		if e.Event == EventFetch {
			out = append(out, e)
		}
	}
	return out
}

// entryPath is where owner's entry for url lies.
func (r *rig) entryPath(owner, url string) string {
	return r.e.Files.urls.path(ownerKey(owner), urlKey(url))
}

// The cache by owner and URL, its entries revalidated on every use.
func TestURLCache(t *testing.T) {
	type step struct {
		owner, path string
		change      *originFile // set on the origin before this fetch
		body        string      // what the fetch returns
		cache, skip string      // the audit line's cache and cache_skip
	}
	v1 := originFile{body: "version one", etag: `"v1"`}
	for _, c := range []struct {
		name                    string
		files                   map[string]originFile
		size                    config.Size // volumes.url_cache_size; 0: the default
		steps                   []step
		conditional, notChanged int // the origin's conditional GETs and 304s
	}{
		{name: "miss then revalidated hit", files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheStored},
				{owner: "alice", path: "/f", body: "version one", cache: CacheRevalidated},
				{owner: "alice", path: "/f", body: "version one", cache: CacheRevalidated},
			}, conditional: 2, notChanged: 2},
		{name: "last-modified alone", files: map[string]originFile{"/f": {body: "dated", lastModified: "Mon, 02 Jan 2006 15:04:05 GMT"}},
			steps: []step{
				{owner: "alice", path: "/f", body: "dated", cache: CacheStored},
				{owner: "alice", path: "/f", body: "dated", cache: CacheRevalidated},
			}, conditional: 1, notChanged: 1},
		{name: "changed etag replaces", files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheStored},
				{owner: "alice", path: "/f", change: &originFile{body: "version two", etag: `"v2"`}, body: "version two", cache: CacheReplaced},
				{owner: "alice", path: "/f", body: "version two", cache: CacheRevalidated},
			}, conditional: 2, notChanged: 1},
		{name: "no-store is not stored", files: map[string]originFile{"/f": {body: "secret", etag: `"s"`, cacheControl: "private, no-store"}},
			steps: []step{
				{owner: "alice", path: "/f", body: "secret", cache: CacheUncached, skip: SkipNoStore},
				{owner: "alice", path: "/f", body: "secret", cache: CacheUncached, skip: SkipNoStore},
			}},
		{name: "no-store later drops the entry", files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheStored},
				{owner: "alice", path: "/f", change: &originFile{body: "now private", etag: `"p"`, cacheControl: "no-store"}, body: "now private", cache: CacheUncached, skip: SkipNoStore},
				{owner: "alice", path: "/f", body: "now private", cache: CacheUncached, skip: SkipNoStore},
			}, conditional: 1},
		{name: "no validator is not stored", files: map[string]originFile{"/f": {body: "plain", cacheControl: "max-age=3600"}},
			steps: []step{
				{owner: "alice", path: "/f", body: "plain", cache: CacheUncached, skip: SkipNoValidator},
				{owner: "alice", path: "/f", body: "plain", cache: CacheUncached, skip: SkipNoValidator},
			}},
		{name: "vary star is not stored", files: map[string]originFile{"/f": {body: "varies", etag: `"x"`, vary: "*"}},
			steps: []step{{owner: "alice", path: "/f", body: "varies", cache: CacheUncached, skip: SkipVary}}},
		{name: "per owner", files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheStored},
				{owner: "bob", path: "/f", body: "version one", cache: CacheStored}, // not alice's copy: no conditional GET
				{owner: "tenant:alice", path: "/f", body: "version one", cache: CacheStored},
				{owner: "bob", path: "/f", body: "version one", cache: CacheRevalidated},
				{owner: "alice", path: "/f", body: "version one", cache: CacheRevalidated},
			}, conditional: 2, notChanged: 2},
		{name: "the query is part of the key", files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f?token=a", body: "version one", cache: CacheStored},
				{owner: "alice", path: "/f?token=b", body: "version one", cache: CacheStored},
				{owner: "alice", path: "/f?token=a", body: "version one", cache: CacheRevalidated},
			}, conditional: 1, notChanged: 1},
		{name: "larger than the cache", size: 64, files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheUncached, skip: SkipTooLarge},
				{owner: "alice", path: "/f", body: "version one", cache: CacheUncached, skip: SkipTooLarge},
			}},
		{name: "off", size: -1, files: map[string]originFile{"/f": v1},
			steps: []step{
				{owner: "alice", path: "/f", body: "version one", cache: CacheOff},
				{owner: "alice", path: "/f", body: "version one", cache: CacheOff},
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOrigin(t)
			for p, f := range c.files {
				o.set(p, f)
			}
			r := netRig(t, o, func(cfg *config.Config) {
				switch {
				case c.size > 0:
					cfg.Volumes.URLCacheSize = c.size
				case c.size < 0:
					cfg.Volumes.URLCacheSize = 0
				}
			})
			for i, s := range c.steps {
				if s.change != nil {
					o.set(strings.SplitN(s.path, "?", 2)[0], *s.change)
				}
				data, d := r.fetch(t, s.owner, o.url(s.path))
				if string(data) != s.body {
					t.Errorf("step %d: got %q, want %q", i, data, s.body)
				}
				skip, _ := d["cache_skip"].(string)
				if d["cache"] != s.cache || skip != s.skip || d["bytes"] != float64(len(s.body)) {
					t.Errorf("step %d (%s %s): audited %v, want cache %q skip %q", i, s.owner, s.path, d, s.cache, s.skip)
				}
				if strings.Contains(fmt.Sprint(d["url"]), "token") {
					t.Errorf("step %d: the audit line keeps the query: %v", i, d["url"])
				}
				_, err := os.Stat(r.entryPath(s.owner, o.url(s.path)))
				if kept := s.cache == CacheStored || s.cache == CacheReplaced || s.cache == CacheRevalidated; kept != (err == nil) {
					t.Errorf("step %d: entry on disk: %v, want kept %v", i, err, kept)
				}
			}
			if gets, cond, nm := o.counts(); gets != len(c.steps) || cond != c.conditional || nm != c.notChanged {
				t.Errorf("the origin had %d GETs, %d conditional, %d answered 304; want %d, %d, %d", gets, cond, nm, len(c.steps), c.conditional, c.notChanged)
			}
			// No name (owner, URL, query) becomes a path, and all is private.
			root := filepath.Join(r.Cfg.Volumes.BasePath, urlCacheDir)
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				fi, _ := d.Info()
				if strings.Contains(p, "alice") || strings.Contains(p, "bob") || strings.Contains(p, "token") {
					t.Errorf("a name became a path: %s", p)
				}
				if d.IsDir() && fi.Mode().Perm() != 0o700 || !d.IsDir() && fi.Mode().Perm() != 0o600 {
					t.Errorf("%s is %v", p, fi.Mode())
				}
				if raw, _ := os.ReadFile(p); !d.IsDir() && strings.Contains(string(raw), "token") {
					t.Errorf("%s holds the URL's query", p)
				}
				return nil
			})
		})
	}
}

// The cache holds at most volumes.url_cache_size, the least recently used
// going first, in this process and after a restart (the order is kept in
// the entries' times).
func TestURLCacheEviction(t *testing.T) {
	o := newOrigin(t)
	body := strings.Repeat("x", 1000)
	for _, p := range []string{"/a", "/b", "/c"} {
		o.set(p, originFile{body: body, etag: `"` + p + `"`})
	}
	// Room for two entries (a line of validators and 1000 bytes each), not three.
	r := netRig(t, o, func(c *config.Config) { c.Volumes.URLCacheSize = 2600 })
	cached := func() (held []string, total int64) {
		for _, p := range []string{"/a", "/b", "/c"} {
			if fi, err := os.Stat(r.entryPath("alice", o.url(p))); err == nil {
				held, total = append(held, p), total+fi.Size()
			}
		}
		return held, total
	}
	for _, s := range []struct {
		path, cache string
		held        string
	}{
		{"/a", CacheStored, "/a"},
		{"/b", CacheStored, "/a /b"},
		{"/a", CacheRevalidated, "/a /b"}, // a is now used after b
		{"/c", CacheStored, "/a /c"},      // b, least recently used, goes
		{"/b", CacheStored, "/b /c"},      // a goes
		{"/c", CacheRevalidated, "/b /c"},
	} {
		_, d := r.fetch(t, "alice", o.url(s.path))
		held, total := cached()
		if d["cache"] != s.cache || strings.Join(held, " ") != s.held || total > 2600 {
			t.Fatalf("fetch %s: %v, cache holds %v (%d bytes); want %s holding %s", s.path, d["cache"], held, total, s.cache, s.held)
		}
	}
	// A restart with a smaller bound keeps the most recently used: c.
	c := newURLCache(filepath.Join(r.Cfg.Volumes.BasePath, urlCacheDir), 1300)
	if _, ok := c.get("alice", o.url("/b"), 1<<20); ok {
		t.Error("b, the least recently used, outlived a lower bound")
	}
	if e, ok := c.get("alice", o.url("/c"), 1<<20); !ok || string(e.Data) != body || e.ETag != `"/c"` {
		t.Errorf("c after a restart: %v %v", e, ok)
	}
}

// An entry that does not match its header (cut short, changed, another
// URL's, no header, larger than volumes.max_file_size now) is ignored and
// removed: the file is fetched whole again; a temporary file a crash left
// is removed on start.
func TestURLCacheCorruptEntry(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, r *rig, path string, o *origin)
	}{
		{"cut short", func(t *testing.T, _ *rig, p string, _ *origin) {
			fi, _ := os.Stat(p)
			if err := os.Truncate(p, fi.Size()-3); err != nil {
				t.Fatal(err)
			}
		}},
		{"a byte changed", func(t *testing.T, _ *rig, p string, _ *origin) {
			raw, _ := os.ReadFile(p)
			raw[len(raw)-1] ^= 1
			os.WriteFile(p, raw, 0o600)
		}},
		{"another URL's entry", func(t *testing.T, r *rig, p string, o *origin) {
			o.set("/other", originFile{body: "other bytes", etag: `"v1"`})
			r.fetch(t, "alice", o.url("/other"))
			if err := os.Rename(r.entryPath("alice", o.url("/other")), p); err != nil {
				t.Fatal(err)
			}
		}},
		{"no header", func(t *testing.T, _ *rig, p string, _ *origin) {
			os.WriteFile(p, []byte("version one"), 0o600)
		}},
		{"empty", func(t *testing.T, _ *rig, p string, _ *origin) {
			os.WriteFile(p, nil, 0o600)
		}},
		{"a link", func(t *testing.T, r *rig, p string, _ *origin) {
			other := filepath.Join(t.TempDir(), "x")
			raw, _ := os.ReadFile(p)
			os.WriteFile(other, raw, 0o600)
			os.Remove(p)
			if err := os.Symlink(other, p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOrigin(t)
			o.set("/f", originFile{body: "version one", etag: `"v1"`})
			r := netRig(t, o, nil)
			u := o.url("/f")
			r.fetch(t, "alice", u)
			c.spoil(t, r, r.entryPath("alice", u), o)
			_, cond0, _ := o.counts()
			data, d := r.fetch(t, "alice", u)
			if _, cond, _ := o.counts(); string(data) != "version one" || d["cache"] != CacheStored || cond != cond0 {
				t.Fatalf("after the entry was spoilt: %q %v (%d conditional GETs, want %d)", data, d, cond, cond0)
			}
			if data, d := r.fetch(t, "alice", u); string(data) != "version one" || d["cache"] != CacheRevalidated {
				t.Fatalf("the entry stored again: %q %v", data, d)
			}
		})
	}

	// Read as when fetched: an entry over volumes.max_file_size (lowered
	// since) is not served; a crash's temporary file goes on start.
	o := newOrigin(t)
	o.set("/f", originFile{body: strings.Repeat("y", 2000), etag: `"v1"`})
	r := netRig(t, o, nil)
	u := o.url("/f")
	r.fetch(t, "alice", u)
	root := filepath.Join(r.Cfg.Volumes.BasePath, urlCacheDir)
	tmp := filepath.Join(filepath.Dir(r.entryPath("alice", u)), ".tmp-0123")
	os.WriteFile(tmp, []byte("half"), 0o600)
	c := newURLCache(root, 1<<30)
	if _, ok := c.get("alice", u, 1999); ok {
		t.Error("an entry over max_file_size was served")
	}
	if _, err := os.Stat(r.entryPath("alice", u)); err == nil {
		t.Error("an entry over max_file_size was kept")
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Error("a temporary file outlived a start")
	}
}

// A revalidated file reaches the run as a fetched one does, within the
// run's limits.
func TestURLCacheInputFile(t *testing.T) {
	o := newOrigin(t)
	o.set("/data.csv", originFile{body: "a,b\n1,2\n", etag: `"d"`})
	var got map[string][]byte
	r := netRig(t, o, func(c *config.Config) { c.Execution.DefaultBackend["python"] = "snake" })
	r.Snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		got = req.InputFiles
		return backend.ExecuteResult{Success: true}, nil
	}
	for i := range 2 {
		got = nil
		in := []engine.InputFile{{Path: "data.csv", URL: o.url("/data.csv")}}
		if _, err := r.Exec(t, engine.Request{Language: "python", InputFiles: in}); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if string(got["data.csv"]) != "a,b\n1,2\n" {
			t.Fatalf("run %d: the backend got %q", i, got)
		}
	}
	if _, _, nm := o.counts(); nm != 1 {
		t.Errorf("%d answers 304, want 1", nm)
	}
	f := r.fetches(t)
	if len(f) != 2 || f[0].Details["cache"] != CacheStored || f[1].Details["cache"] != CacheRevalidated {
		t.Errorf("audited %v", f)
	}
}

// Fetches at once, of the same URLs by two owners, under a bound of two
// entries: each gets its own bytes, and the cache's count is what its
// directory holds, within the bound.
func TestURLCacheConcurrent(t *testing.T) {
	o := newOrigin(t)
	paths := []string{"/a", "/b", "/c"}
	for _, p := range paths {
		o.set(p, originFile{body: strings.Repeat(p[1:], 1000), etag: `"` + p + `"`})
	}
	r := netRig(t, o, func(c *config.Config) { c.Volumes.URLCacheSize = 2600 })
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := paths[i%len(paths)]
			owner := []string{"alice", "bob"}[i%2]
			data, err := r.e.Files.fetchInput(context.Background(), engine.Request{Client: owner, Language: "python"}, "execute_python", "input_files[0]", o.url(p))
			if err != nil || string(data) != strings.Repeat(p[1:], 1000) {
				t.Errorf("%s %s: %.20q %v", owner, p, data, err)
			}
		}()
	}
	wg.Wait()
	c := r.e.Files.urls
	var onDisk int64
	_ = filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			onDisk += fi.Size()
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if onDisk != c.total || c.total > c.bound {
		t.Errorf("the cache counts %d bytes, its directory holds %d, the bound is %d", c.total, onDisk, c.bound)
	}
}
