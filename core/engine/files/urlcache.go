package files

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// What the file.fetch audit line says of the cache (details "cache").
const (
	CacheOff         = "off"         // volumes.url_cache_size is "": nothing is kept
	CacheRevalidated = "revalidated" // the server answered 304: the bytes came from the cache
	CacheStored      = "stored"      // fetched (200) and kept, the owner had no entry for the URL
	CacheReplaced    = "replaced"    // fetched (200) and kept in place of the owner's older entry
	CacheUncached    = "uncached"    // fetched (200) and not kept: details "cache_skip" says why
)

// Why an answer was not kept (details "cache_skip").
const (
	SkipNoStore     = "no-store"     // Cache-Control: no-store
	SkipNoValidator = "no-validator" // neither ETag nor Last-Modified: it could not be revalidated
	SkipVary        = "vary"         // Vary: *
	SkipTooLarge    = "too-large"    // larger than volumes.url_cache_size
	SkipError       = "error"        // the entry could not be written (cache_error says why)
)

// urlCacheDir is the cache's directory under volumes.base_path.
var urlCacheDir = filepath.Join("state", "url-cache")

// maxHeader bounds an entry's first line (its validators).
const maxHeader = 16 << 10

// urlCache keeps URL input files on disk, by owner and URL, with the
// validators their server gave, so that a later fetch of the same URL by
// the same owner is a conditional GET, answered 304 without the bytes
// when they have not changed. It never answers without asking the
// server: every use still goes through a grant and the egress proxy.
//
// Layout: root (<base>/state/url-cache, 0700) holds one 0700 directory
// per owner, named by a hash of the owner (a tenant or connection name
// never becomes a path), and in it one file per URL, named by a hash of
// the whole URL (query included: the URL itself is not written). A file
// is one JSON line (the validators, the length and SHA-256 of the bytes)
// and then the bytes; it is written to a temporary file and renamed, and
// one that does not match its line is ignored and removed, so that a
// crash never serves a partial entry. What all entries take together is
// bounded by volumes.url_cache_size, the least recently used going first.
type urlCache struct {
	root  string
	bound int64 // bytes; 0: the cache is off

	mu      sync.Mutex
	loaded  bool
	entries map[string]*cacheSlot // "owner/url" key → its file
	total   int64
}

type cacheSlot struct {
	size int64     // of the file
	used time.Time // last served or stored (the file's mtime across restarts)
}

// cacheEntry is what one entry holds.
type cacheEntry struct {
	ETag         string
	LastModified string
	Data         []byte
}

// cacheHeader is an entry's first line.
type cacheHeader struct {
	Version      int    `json:"v"`
	Owner        string `json:"owner"` // the owner's hash: the entry's directory
	Key          string `json:"key"`   // the URL's hash: the entry's name
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	Size         int64  `json:"size"`
	SHA256       string `json:"sha256"`
}

func newURLCache(root string, bound int64) *urlCache {
	return &urlCache{root: root, bound: bound, entries: map[string]*cacheSlot{}}
}

// on reports whether the cache keeps anything.
func (c *urlCache) on() bool { return c != nil && c.bound > 0 }

// ownerKey names an owner's directory: a hash, as the checkpoint store
// names a client's, so that a name never becomes a path, and stable
// across restarts.
func ownerKey(owner string) string {
	h := sha256.Sum256([]byte("forge-url-cache-owner\x00" + owner))
	return hex.EncodeToString(h[:16])
}

// urlKey names a URL's entry: a hash of the whole URL, query included.
func urlKey(raw string) string {
	h := sha256.Sum256([]byte("forge-url-cache-url\x00" + raw))
	return hex.EncodeToString(h[:])
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func (c *urlCache) path(owner, key string) string { return filepath.Join(c.root, owner, key) }

// load indexes the entries on disk once (those of earlier runs of the
// server), removes what a crash left half-written, and evicts down to the
// bound, which may have been lowered. Called with c.mu held.
func (c *urlCache) load() {
	if c.loaded {
		return
	}
	c.loaded = true
	owners, _ := os.ReadDir(c.root)
	for _, o := range owners {
		if !o.IsDir() || !isHex(o.Name(), 32) {
			continue
		}
		dir := filepath.Join(c.root, o.Name())
		files, _ := os.ReadDir(dir)
		for _, f := range files {
			p := filepath.Join(dir, f.Name())
			switch {
			case strings.HasPrefix(f.Name(), ".tmp-"):
				_ = os.Remove(p)
			case f.Type().IsRegular() && isHex(f.Name(), 64):
				if fi, err := f.Info(); err == nil {
					c.entries[o.Name()+"/"+f.Name()] = &cacheSlot{size: fi.Size(), used: fi.ModTime()}
					c.total += fi.Size()
				}
			}
		}
	}
	c.evict(0, "")
}

// maxCacheEntries bounds the entries whatever their size: tiny answers
// to unique URLs must not fill a directory (and the map) without end.
const maxCacheEntries = 4096

// evict removes the least recently used entries, keep aside, until room
// more bytes fit under the bound and one more entry under the count.
// Called with c.mu held.
func (c *urlCache) evict(room int64, keep string) {
	for c.total+room > c.bound || (keep != "" && c.entries[keep] == nil && len(c.entries) >= maxCacheEntries) {
		oldest := ""
		for k, s := range c.entries {
			if k != keep && (oldest == "" || s.used.Before(c.entries[oldest].used)) {
				oldest = k
			}
		}
		if oldest == "" {
			return
		}
		c.drop(oldest)
	}
}

// drop forgets and removes entry k. Called with c.mu held.
func (c *urlCache) drop(k string) {
	if s, ok := c.entries[k]; ok {
		c.total -= s.size
		delete(c.entries, k)
	}
	owner, key, _ := strings.Cut(k, "/")
	_ = os.Remove(c.path(owner, key))
}

// get returns owner's entry for raw, if it holds one whose bytes are
// whole and at most max; an entry that is not is removed.
func (c *urlCache) get(owner, raw string, max int64) (*cacheEntry, bool) {
	if !c.on() {
		return nil, false
	}
	o, k := ownerKey(owner), urlKey(raw)
	c.mu.Lock()
	c.load()
	_, ok := c.entries[o+"/"+k]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	// An entry is never written in place (written aside, then renamed), so
	// it is read without the lock: an eviction meanwhile removes the name,
	// not what the open file holds.
	e, err := readEntry(c.path(o, k), o, k, max)
	if err != nil {
		c.mu.Lock()
		c.drop(o + "/" + k)
		c.mu.Unlock()
		return nil, false
	}
	return e, true
}

// readEntry reads and checks one entry file.
func readEntry(p, owner, key string, max int64) (*cacheEntry, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > max+maxHeader:
		return nil, errors.New("over volumes.max_file_size")
	}
	r := bufio.NewReaderSize(io.LimitReader(f, max+maxHeader+1), maxHeader)
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("no header: %w", err)
	}
	var h cacheHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, err
	}
	switch {
	case h.Version != 1 || h.Owner != owner || h.Key != key:
		return nil, errors.New("another entry's header")
	case h.Size < 0 || h.Size > max:
		return nil, errors.New("over volumes.max_file_size")
	case h.ETag == "" && h.LastModified == "":
		return nil, errors.New("no validator")
	}
	data, err := io.ReadAll(io.LimitReader(r, h.Size+1))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != h.Size || hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, errors.New("the bytes do not match the header")
	}
	return &cacheEntry{ETag: h.ETag, LastModified: h.LastModified, Data: data}, nil
}

// touch marks owner's entry for raw used now (it was served).
func (c *urlCache) touch(owner, raw string) {
	o, k := ownerKey(owner), urlKey(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.entries[o+"/"+k]; ok {
		s.used = time.Now()
		_ = os.Chtimes(c.path(o, k), s.used, s.used) // the order across restarts
	}
}

// remove forgets owner's entry for raw, if any.
func (c *urlCache) remove(owner, raw string) {
	if !c.on() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	if k := ownerKey(owner) + "/" + urlKey(raw); c.entries[k] != nil {
		c.drop(k)
	}
}

// storable says why an answer is not kept ("": it is).
func storable(h http.Header) string {
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(d), "=")
			if strings.EqualFold(strings.TrimSpace(name), "no-store") {
				return SkipNoStore
			}
		}
	}
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if strings.TrimSpace(f) == "*" {
				return SkipVary
			}
		}
	}
	if h.Get("ETag") == "" && h.Get("Last-Modified") == "" {
		return SkipNoValidator
	}
	return ""
}

// put keeps data as owner's entry for raw with the validators of h, and
// says what it did: CacheStored, CacheReplaced, or why not (a Skip*,
// with the error when writing failed).
func (c *urlCache) put(owner, raw string, h http.Header, data []byte) (string, string, error) {
	if why := storable(h); why != "" {
		c.remove(owner, raw)
		return CacheUncached, why, nil
	}
	o, k := ownerKey(owner), urlKey(raw)
	sum := sha256.Sum256(data)
	line, err := json.Marshal(cacheHeader{Version: 1, Owner: o, Key: k, ETag: h.Get("ETag"), LastModified: h.Get("Last-Modified"),
		Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	if err != nil || len(line) >= maxHeader {
		c.remove(owner, raw)
		return CacheUncached, SkipTooLarge, nil // validators of absurd length
	}
	size := int64(len(line)) + 1 + int64(len(data))
	if size > c.bound {
		c.remove(owner, raw)
		return CacheUncached, SkipTooLarge, nil
	}
	tmp, err := c.writeAside(o, append(append(line, '\n'), data...))
	if err != nil {
		c.remove(owner, raw)
		return CacheUncached, SkipError, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	key := o + "/" + k
	old, had := c.entries[key]
	if had {
		c.total -= old.size
		delete(c.entries, key)
	}
	c.evict(size, key)
	if err := os.Rename(tmp, c.path(o, k)); err != nil {
		_ = os.Remove(tmp)
		_ = os.Remove(c.path(o, k))
		return CacheUncached, SkipError, err
	}
	c.entries[key] = &cacheSlot{size: size, used: time.Now()}
	c.total += size
	if had {
		return CacheReplaced, "", nil
	}
	return CacheStored, "", nil
}

// writeAside writes b to a new temporary file in owner o's directory,
// synced, and returns its path.
func (c *urlCache) writeAside(o string, b []byte) (string, error) {
	dir, err := c.mkOwnerDir(o)
	if err != nil {
		return "", err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	p := filepath.Join(dir, ".tmp-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(f, bytes.NewReader(b))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(p)
		return "", err
	}
	return p, nil
}

// mkOwnerDir creates the cache and owner o's directory, each 0700: they
// hold users' data, readable by the server alone.
func (c *urlCache) mkOwnerDir(o string) (string, error) {
	if err := os.Mkdir(filepath.Dir(c.root), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if fi, err := os.Lstat(c.root); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("the URL cache %s is a symbolic link: refused", c.root)
	}
	dir := filepath.Join(c.root, o)
	for _, p := range []string{c.root, dir} {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", p)
		}
		if err := os.Chmod(p, 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}
