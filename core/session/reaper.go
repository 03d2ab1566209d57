package session

import "time"

// idle reports whether a session has waited longer than limit for a call
// (caller holds the registry's lock).
func idle(s *Session, limit time.Duration) bool {
	return s.State != StateBusy && s.State != StateStarting && s.State != StateGone && s.Job == "" && time.Since(s.LastActive) > limit
}

// ReapIdle calls destroy for every session idle longer than limit, holding
// that session's operation lock; it returns how many. A session a call
// used since the scan (its operation lock taken first) is left alone.
func (r *Registry) ReapIdle(limit time.Duration, destroy func(*Session)) int {
	return r.EachIdle(limit, func(s *Session) bool { destroy(s); return true })
}

// EachIdle calls f for every session idle longer than limit, as ReapIdle
// does, and returns for how many f answered true.
func (r *Registry) EachIdle(limit time.Duration, f func(*Session) bool) int {
	r.mu.Lock()
	var candidates []*Session
	for _, s := range r.sessions {
		if idle(s, limit) {
			candidates = append(candidates, s)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, s := range candidates {
		s.Lock()
		// A call may have used it since the scan.
		r.mu.Lock()
		still := idle(s, limit)
		r.mu.Unlock()
		if still && f(s) {
			n++
		}
		s.Unlock()
	}
	return n
}
