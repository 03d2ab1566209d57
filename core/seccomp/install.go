package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Path is where the core keeps the profile under volumes.base_path. The name
// carries the profile's digest, so servers of different versions sharing a
// base path never overwrite each other's profile. The policy never lets a
// container mount this file (it is outside sessions/, uploads/ and shared/).
func Path(base string) string {
	return filepath.Join(base, "mcp-forge-seccomp-"+Digest()[:16]+".json")
}

// GVisorPath is where the core keeps the gVisor variant (GVisorJSON).
func GVisorPath(base string) string {
	return filepath.Join(base, gvisorPrefix+digest(GVisorJSON())[:16]+".json")
}

const gvisorPrefix = "mcp-forge-seccomp-gvisor-"

// Install writes both profiles under base unless they are already there, and
// returns the path of the container's. The writes are atomic (temporary
// file, then rename), so a concurrent server or container create never
// reads half a profile.
func Install(base string) (string, error) {
	for _, f := range []struct {
		path string
		json []byte
	}{{Path(base), JSON()}, {GVisorPath(base), GVisorJSON()}} {
		if err := install(base, f.path, f.json); err != nil {
			return "", err
		}
	}
	return Path(base), nil
}

func install(base, p string, doc []byte) error {
	if verify(p, doc) == nil {
		return nil
	}
	if err := os.MkdirAll(base, 0o711); err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	tmp, err := os.CreateTemp(base, ".seccomp-*.json")
	if err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(doc)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		return fmt.Errorf("seccomp profile: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	return nil
}

// Verify checks that path holds exactly the profile its name says (the
// container's, or gVisor's variant), so that a deleted or edited file can
// never hand Podman a weaker (or its default) profile.
func Verify(path string) error {
	if strings.HasPrefix(filepath.Base(path), gvisorPrefix) {
		return verify(path, GVisorJSON())
	}
	return verify(path, JSON())
}

func verify(path string, doc []byte) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("MCP-Forge's seccomp profile %s is missing; restart the server, which writes it", path)
	}
	if err != nil {
		return fmt.Errorf("MCP-Forge's seccomp profile: %w", err)
	}
	if !bytes.Equal(b, doc) {
		return fmt.Errorf("MCP-Forge's seccomp profile %s has been modified; remove it and restart the server, which rewrites it", path)
	}
	return nil
}
