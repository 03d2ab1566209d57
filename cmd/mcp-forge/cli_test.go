package main

import (
	"slices"
	"testing"
)

func TestParseArgsFlagsAnywhere(t *testing.T) {
	t.Setenv("FORGE_CONFIG", "")
	cases := []struct {
		args    []string
		cmd     string
		rest    []string
		config  string
		wantErr bool
	}{
		{args: []string{"--config", "a.toml", "serve"}, cmd: "serve", config: "a.toml"},
		{args: []string{"serve", "--config", "a.toml"}, cmd: "serve", config: "a.toml"},
		{args: []string{"serve", "--config=a.toml"}, cmd: "serve", config: "a.toml"},
		{args: []string{"config", "check", "f.toml", "-config", "b.toml"}, cmd: "config", rest: []string{"check", "f.toml"}, config: "b.toml"},
		{args: []string{"config", "--config", "b.toml", "print"}, cmd: "config", rest: []string{"print"}, config: "b.toml"},
		{args: []string{"serve", "--", "--config"}, cmd: "serve", rest: []string{"--config"}},
		{args: []string{"serve", "--confg", "a.toml"}, wantErr: true},
		{args: []string{"--bogus", "serve"}, wantErr: true},
		{args: []string{"serve", "--config"}, wantErr: true},
		{args: nil},
	}
	for _, c := range cases {
		configPath = ""
		cmd, rest, err := parseArgs(c.args)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: error %v, want error %v", c.args, err, c.wantErr)
			continue
		}
		if c.wantErr {
			continue
		}
		if cmd != c.cmd || !slices.Equal(rest, c.rest) || configPath != c.config {
			t.Errorf("%q: got cmd %q rest %q config %q; want %q %q %q", c.args, cmd, rest, configPath, c.cmd, c.rest, c.config)
		}
	}
}
