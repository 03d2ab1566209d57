package podman

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Candidates lists where a Podman API socket is looked for, in order: the
// configured path, $CONTAINER_HOST, the rootful socket, the rootless one.
func Candidates(configured string, getenv func(string) string) []string {
	var out []string
	if configured != "" {
		return []string{"unix://" + strings.TrimPrefix(configured, "unix://")}
	}
	if h := getenv("CONTAINER_HOST"); h != "" {
		out = append(out, h)
	}
	if os.Geteuid() == 0 {
		out = append(out, "unix:///run/podman/podman.sock")
	}
	if rt := getenv("XDG_RUNTIME_DIR"); rt != "" {
		out = append(out, "unix://"+filepath.Join(rt, "podman", "podman.sock"))
	} else if os.Geteuid() != 0 {
		out = append(out, fmt.Sprintf("unix:///run/user/%d/podman/podman.sock", os.Geteuid()))
	}
	return out
}

// Discover returns the first candidate socket that exists and is accessible,
// or an error that says what was tried and what to run.
func Discover(configured string, getenv func(string) string) (string, error) {
	cands := Candidates(configured, getenv)
	var problems []string
	for _, c := range cands {
		if !strings.HasPrefix(c, "unix://") {
			return c, nil // tcp:// or ssh:// from CONTAINER_HOST: let the bindings try
		}
		p := strings.TrimPrefix(c, "unix://")
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, p+": does not exist")
			continue
		case errors.Is(err, os.ErrPermission):
			problems = append(problems, p+": permission denied (run as root or as the socket's owner)")
			continue
		case err != nil:
			problems = append(problems, p+": "+err.Error())
			continue
		case st.Mode()&os.ModeSocket == 0:
			problems = append(problems, p+": not a socket")
			continue
		}
		if f, err := os.OpenFile(filepath.Dir(p), os.O_RDONLY, 0); err == nil {
			f.Close()
		}
		return c, nil
	}
	hint := "start it with `podman system service --time=0 unix:///run/podman/podman.sock &` (root) or `make setup-user` (rootless: starts your own service on $XDG_RUNTIME_DIR/podman/podman.sock), or run `make setup`"
	return "", fmt.Errorf("no Podman API socket found (tried %s); %s", strings.Join(problems, "; "), hint)
}
