// Package procid names a process so that the name survives pid reuse:
// "<pid>-<start time>". Containers, workspaces and quota images carry the
// name of the server that made them, so that a later server can tell a dead
// server's leftovers from a live neighbour's.
package procid

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Of is the name of process pid: "<pid>-<start time in clock ticks>".
func Of(pid int) string { return fmt.Sprintf("%d-%s", pid, start(pid)) }

// Self is this process's name.
func Self() string { return Of(os.Getpid()) }

// Alive reports whether id names a running process (the same pid started at
// the same time).
func Alive(id string) bool {
	pidStr, _, ok := strings.Cut(id, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	if Of(pid) != id {
		return false
	}
	// A zombie has ended: its files and mounts are no longer in use, and
	// its parent may be slow to reap it.
	st := state(pid)
	return st != "Z" && st != "X"
}

// state is the one-letter state of process pid ("" if unknown).
func state(pid int) string {
	f := statFields(pid)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// statFields are the fields of /proc/<pid>/stat after the command name.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	// The command name may hold spaces and parentheses: fields follow the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func start(pid int) string {
	if f := statFields(pid); len(f) > 19 {
		return f[19]
	}
	return "0"
}
