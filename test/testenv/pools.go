package testenv

import (
	"strings"
	"testing"
)

// NoSessionPools is server configuration that turns the warm kernel pools of
// the session backends off, for tests that count every container of a
// server (the pools have their own tests).
const NoSessionPools = "[plugins.jupyter.config]\nwarm = 0\n[plugins.irkernel.config]\nwarm = 0\n"

// DefaultPools in a test's configuration keeps the warm pools of the
// shipped defaults (a TOML comment): for the tests of warm runs and warm
// sessions, and whatever asserts that a call was served warm.
const DefaultPools = "# testenv: the default warm pools\n"

// pooled are the plugins whose warm pools a server fills at start.
var pooled = []string{"python", "r", "jupyter", "irkernel"}

// Lean is extra with the warm pools off for every pooled plugin that extra
// does not configure itself, unless it holds DefaultPools. A server with the
// default pools starts six containers (two kernels among them) before its
// first call and removes them at its end: most tests never use one, and on
// the two cores CI has, the suite spent about a third of its time filling
// pools. Benchmarks (a *testing.B) keep the defaults: they measure them.
func Lean(t testing.TB, extra string) string {
	if _, bench := t.(*testing.B); bench || strings.Contains(extra, DefaultPools) {
		return extra
	}
	var b strings.Builder
	b.WriteString(extra)
	if extra != "" && !strings.HasSuffix(extra, "\n") {
		b.WriteString("\n")
	}
	for _, p := range pooled {
		if !strings.Contains(extra, "[plugins."+p+"]") && !strings.Contains(extra, "[plugins."+p+".") {
			b.WriteString("[plugins." + p + ".config]\nwarm = 0\n")
		}
	}
	return b.String()
}
