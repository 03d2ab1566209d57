package loader

import (
	"strings"
	"testing"
)

// The checkpoint store's bound is a size that holds at least one session's
// checkpoint; a bad one is named by its field path.
func TestCheckpointStoreQuota(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		store, quota, want string
	}{
		{"10g", "1g", ""},
		{"1g", "1g", ""},
		{"512m", "1g", "sessions.checkpoint_store_quota: must be >= volumes.session_quota (1g), got 512m"}, // not even one checkpoint fits
		{"lots", "1g", `sessions.checkpoint_store_quota: size "lots" is not a number with k, m or g`},
		{"", "1g", `sessions.checkpoint_store_quota: size "" is empty`},
		{"0", "1g", `sessions.checkpoint_store_quota: size "0" must be greater than zero`},
	} {
		_, err := LoadWith("", envOf(map[string]string{"FORGE_SESSIONS_CHECKPOINT_STORE_QUOTA": c.store, "FORGE_VOLUMES_SESSION_QUOTA": c.quota}))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("store %q quota %s: %q, want an error with %q", c.store, c.quota, got, c.want)
		}
	}
}

// sessions.checkpoint_dir is an absolute path, or empty for the host's own
// store.
func TestCheckpointDir(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dir, want string }{
		{"", ""},
		{"/var/lib/mcp-forge-checkpoints/store", ""},
		{"checkpoints", "sessions.checkpoint_dir"},
	} {
		cfg, err := LoadWith("", envOf(map[string]string{"FORGE_SESSIONS_CHECKPOINT_DIR": c.dir}))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("checkpoint_dir %q: %q, want an error with %q", c.dir, got, c.want)
		}
		if err == nil && cfg.Sessions.CheckpointDir != c.dir {
			t.Errorf("checkpoint_dir %q read as %q", c.dir, cfg.Sessions.CheckpointDir)
		}
	}
}
