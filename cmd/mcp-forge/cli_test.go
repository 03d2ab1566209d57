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
		http    string
		wantErr bool
	}{
		{args: []string{"serve", "--http", "127.0.0.1:3000"}, cmd: "serve", http: "127.0.0.1:3000"},
		{args: []string{"--http=:8080", "--config", "a.toml", "serve"}, cmd: "serve", config: "a.toml", http: ":8080"},
		{args: []string{"serve", "--http"}, wantErr: true},
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
		configPath, httpAddr = "", ""
		cmd, rest, err := parseArgs(c.args)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: error %v, want error %v", c.args, err, c.wantErr)
			continue
		}
		if c.wantErr {
			continue
		}
		if cmd != c.cmd || !slices.Equal(rest, c.rest) || configPath != c.config || httpAddr != c.http {
			t.Errorf("%q: got cmd %q rest %q config %q http %q; want %q %q %q %q", c.args, cmd, rest, configPath, httpAddr, c.cmd, c.rest, c.config, c.http)
		}
	}
}
