package session

import "time"

// Starts counts how one backend's kernels were started: taken warm from
// its pool or started cold, and how long the last of each took.
type Starts struct {
	Warm       int
	Cold       int
	LastWarmMS float64
	LastColdMS float64
}

// CountStart records a kernel of backend name started (warm: taken from
// its pool) in took.
func (r *Registry) CountStart(name string, warm bool, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.starts[name]
	if st == nil {
		st = &Starts{}
		r.starts[name] = st
	}
	ms := float64(took.Microseconds()) / 1000
	if warm {
		st.Warm, st.LastWarmMS = st.Warm+1, ms
	} else {
		st.Cold, st.LastColdMS = st.Cold+1, ms
	}
}

// StartStats reports Starts per backend.
func (r *Registry) StartStats() map[string]Starts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Starts, len(r.starts))
	for k, v := range r.starts {
		out[k] = *v
	}
	return out
}
