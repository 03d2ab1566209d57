package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Keys are case-sensitive: the decoder would fill [server] from [Server],
// and with both in one file which one wins would depend on map order.
func TestKeysAreCaseSensitive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forge.toml")
	for _, text := range []string{"[Server]\nport = 3001\n", "[server]\nPort = 3001\n", "[sErver]\nport = 3000\n[server]\nport = 3001\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadWith(path, func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), "keys are case-sensitive") {
			t.Errorf("%q: %v", text, err)
		}
	}
	// Map keys keep their case: environment variable names are upper case.
	if err := os.WriteFile(path, []byte("[mcp_tools.mem]\ncommand = \"x\"\nenv = { API_TOKEN = \"t\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadWith(path, func(string) (string, bool) { return "", false }); err != nil {
		t.Errorf("upper-case map key refused: %v", err)
	}
}
