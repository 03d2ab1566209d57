package config

import (
	"strings"
	"testing"
)

// The checkpoint store's bound is a size that holds at least one session's
// checkpoint; a bad one is named by its field path.
func TestCheckpointStoreQuota(t *testing.T) {
	for _, c := range []struct {
		store, quota, want string
	}{
		{"10g", "1g", ""},
		{"1g", "1g", ""},
		{"512m", "1g", "sessions.checkpoint_store_quota"}, // not even one checkpoint fits
		{"lots", "1g", "sessions.checkpoint_store_quota"},
		{"", "1g", "sessions.checkpoint_store_quota"},
		{"0", "1g", "sessions.checkpoint_store_quota"},
	} {
		cfg := Default()
		cfg.Sessions.CheckpointStoreQuota, cfg.Volumes.SessionQuota = c.store, c.quota
		errs := Validate(cfg)
		got := ""
		if len(errs) > 0 {
			got = errs.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("store %q quota %s: %q, want an error naming %q", c.store, c.quota, got, c.want)
		}
	}
}
