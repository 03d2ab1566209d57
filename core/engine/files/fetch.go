package files

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/network"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// RuleInputURL refuses a URL input file that cannot be fetched.
const RuleInputURL = "input-url"

// EventFetch is the audit line of a URL the core fetched for a run.
const EventFetch = "file.fetch"

// fetchTimeout bounds one URL input file's fetch.
const fetchTimeout = 60 * time.Second

// fetchInput fetches a URL input file the way the run's own code would
// reach it: a grant of its host under the network policy (the caller's,
// with approval as configured), through the egress proxy with every check,
// budget and audit line of a run's connection, at most
// volumes.max_file_size. Redirects are not followed (the answer says
// where to). The caller's copy from an earlier fetch (urlCache) is
// revalidated with a conditional GET and served when the server answers
// 304 Not Modified; it is never served without asking.
func (w *Files) fetchInput(ctx context.Context, req engine.Request, tool, where, raw string) ([]byte, error) {
	u, err := url.Parse(raw)
	shown := raw
	if err == nil {
		shown = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String() // no query: it may hold a token
	}
	refuse := func(rule, format string, args ...any) error {
		return w.eng.Refuse(req.Client, "", tool, refusal.New(rule, format, args...), map[string]any{"url": auditPath(shown)})
	}
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return nil, refuse(RuleInputURL, "%s.url %s: give an absolute https:// (or http://) URL, without a user or password", where, refusal.Quoted(shown))
	}
	if w.eng.Network() == nil {
		return nil, refuse(network.RuleNetworkUnavailable, "%s.url: this server grants no network, so it fetches no URL: upload the file instead", where)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	host := net.JoinHostPort(u.Hostname(), port)
	if _, err := strconv.Atoi(port); err != nil {
		return nil, refuse(RuleInputURL, "%s.url %s: the port is not a number", where, refusal.Quoted(shown))
	}
	ch, err := w.eng.Network().Open(ctx, network.Ask{Hosts: []string{host}, Client: req.Client, Run: "fetch-" + engine.NewID(), Tool: tool, Approve: req.Approve}, "core")
	if err != nil {
		return nil, err // refused and audited
	}
	defer ch.Close()
	sock := filepath.Join(ch.Dir(), egress.SocketName)
	client := &http.Client{Timeout: fetchTimeout,
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, refuse(RuleInputURL, "%s.url %s: %v", where, refusal.Quoted(shown), err)
	}
	// The caller's cached copy, if any, makes this a conditional GET: the
	// server (through the same grant and proxy) says whether it still holds.
	max := w.maxFileSize()
	cached, _ := w.urls.get(req.Client, raw, max)
	if cached != nil {
		if cached.ETag != "" {
			hreq.Header.Set("If-None-Match", cached.ETag)
		}
		if cached.LastModified != "" {
			hreq.Header.Set("If-Modified-Since", cached.LastModified)
		}
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, refuse(RuleInputURL, "%s.url %s could not be fetched: %v", where, refusal.Quoted(shown), err)
	}
	defer resp.Body.Close()
	details := map[string]any{"url": auditPath(shown), "tool": tool}
	switch {
	case resp.StatusCode == http.StatusNotModified && cached != nil:
		if storable(resp.Header) == SkipNoStore {
			w.urls.remove(req.Client, raw) // served this once more, kept no longer
		} else {
			w.urls.touch(req.Client, raw)
		}
		details["bytes"], details["cache"] = len(cached.Data), CacheRevalidated
		w.rec.Record(audit.Entry{Event: EventFetch, UserID: req.Client, Success: true, Details: details})
		return cached.Data, nil
	case resp.StatusCode == http.StatusNotModified:
		return nil, refuse(RuleInputURL, "%s.url %s answered %s to a request that was not conditional", where, refusal.Quoted(shown), resp.Status)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, refuse(RuleInputURL, "%s.url %s redirects (%s) to %s: give that URL instead", where, refusal.Quoted(shown), resp.Status, refusal.Quoted(resp.Header.Get("Location")))
	case resp.StatusCode != http.StatusOK:
		why := resp.Status
		if r := resp.Header.Get(egress.RuleHeader); r != "" {
			why += " (the egress proxy's rule " + r + ")"
		}
		return nil, refuse(RuleInputURL, "%s.url %s answered %s", where, refusal.Quoted(shown), why)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	switch {
	case int64(len(data)) > max:
		w.urls.remove(req.Client, raw)
		return nil, refuse(RuleFileSize, "%s.url %s is over the %s limit of one file (volumes.max_file_size)", where, refusal.Quoted(shown), config.FormatSize(max))
	case err != nil:
		return nil, refuse(RuleInputURL, "%s.url %s: the answer broke off: %v", where, refusal.Quoted(shown), err)
	}
	details["bytes"] = len(data)
	if !w.urls.on() {
		details["cache"] = CacheOff
	} else {
		what, why, err := w.urls.put(req.Client, raw, resp.Header, data)
		details["cache"] = what
		if why != "" {
			details["cache_skip"] = why
		}
		if err != nil {
			details["cache_error"] = err.Error()
		}
	}
	w.rec.Record(audit.Entry{Event: EventFetch, UserID: req.Client, Success: true, Details: details})
	return data, nil
}
