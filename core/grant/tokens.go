package grant

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
)

// Tokens are the live grants of one kind by their tokens: a backend plugin
// copies a grant's token into its container's intent, and the core
// resolves it for the plugin it was issued to only. A token is an opaque
// random name, also the grant's directory name where it has one.
type Tokens[G any] struct {
	mu   sync.Mutex
	live map[string]issued[G]
}

type issued[G any] struct {
	plugin string
	g      G
}

// NewToken is a fresh token (16 random bytes in hex).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// Put makes g, issued to plugin, live under token.
func (t *Tokens[G]) Put(token, plugin string, g G) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live == nil {
		t.live = map[string]issued[G]{}
	}
	t.live[token] = issued[G]{plugin, g}
}

// Lookup is the live grant token names if it was issued to plugin: another
// plugin's and an unknown or removed one are alike (false).
func (t *Tokens[G]) Lookup(plugin, token string) (G, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.live[token]
	if !ok || i.plugin != plugin {
		var zero G
		return zero, false
	}
	return i.g, true
}

// Remove takes token's grant out, and reports whether it was live.
func (t *Tokens[G]) Remove(token string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.live[token]
	delete(t.live, token)
	return ok
}

// All are the live grants (a server stopping ends them).
func (t *Tokens[G]) All() []G {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []G
	for _, i := range slices.Collect(maps.Values(t.live)) {
		out = append(out, i.g)
	}
	return out
}

// Len counts the live grants.
func (t *Tokens[G]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// Cut shows a token a caller sent, cut short for a message.
func Cut(token string) string {
	if len(token) > 32 {
		return token[:32] + "…"
	}
	return token
}
