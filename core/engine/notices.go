package engine

// AddResultNotice registers f, asked after every run: a non-empty answer is
// added to that result's notices (for example that resource limits were not
// enforced). Call it before serving.
func (e *Engine) AddResultNotice(f func() string) {
	e.notices = append(e.notices, f)
}

func (e *Engine) resultNotices() []string {
	var out []string
	for _, f := range e.notices {
		if n := f(); n != "" {
			out = append(out, n)
		}
	}
	return out
}
