package host

import (
	"fmt"
	"slices"
	"strings"
)

// Signal is a signal a plugin may send to a container's processes
// (Sandbox.Signal). The core refuses any other.
type Signal string

// The signals a plugin may send.
const (
	SIGINT  Signal = "INT"
	SIGTERM Signal = "TERM"
	SIGKILL Signal = "KILL"
	SIGHUP  Signal = "HUP"
	SIGQUIT Signal = "QUIT"
	SIGUSR1 Signal = "USR1"
	SIGUSR2 Signal = "USR2"
)

// Signals lists every Signal, in the order errors name them.
var Signals = []Signal{SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}

// Normal is s as Signals spell it: "SIGINT" and "int" are SIGINT.
func (s Signal) Normal() Signal {
	return Signal(strings.TrimPrefix(strings.ToUpper(string(s)), "SIG"))
}

// Check returns an invalid-request *Error for a signal that is not one of
// Signals (in any spelling Normal accepts).
func (s Signal) Check() error {
	if slices.Contains(Signals, s.Normal()) {
		return nil
	}
	return Errorf(KindInvalid, "signal %q is not one of %s", string(s), join(Signals))
}

// Stream names an output stream of a command or a run.
type Stream string

// The output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Check returns an invalid-request *Error for a stream other than Stdout
// and Stderr.
func (s Stream) Check() error {
	if s == Stdout || s == Stderr {
		return nil
	}
	return Errorf(KindInvalid, "output stream %q is not %s or %s", string(s), Stdout, Stderr)
}

func join[T ~string](vs []T) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}

var _ fmt.Stringer = SIGINT // printed as its name

// String is the signal's name (INT).
func (s Signal) String() string { return string(s) }
