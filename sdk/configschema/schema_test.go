package configschema

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

type image struct {
	Image    string   `json:"image"`
	Packages []string `json:"packages"`
}

type server struct {
	Command string            `json:"command"`
	Env     map[string]string `json:"env"`
}

type cfg struct {
	image
	Warm      *int              `json:"warm"`
	Ratio     float64           `json:"ratio"`
	Debug     bool              `json:"debug,omitempty"`
	Servers   map[string]server `json:"servers"`
	Mounts    []server          `json:"mounts"`
	Extra     any               `json:"extra"`
	MaxOutput int64             `json:"max_output_bytes" forge:"core"`
	hidden    int               //lint:ignore U1000 an unexported field, which the schema must leave out
	Skipped   string            `json:"-"`
}

func TestValidate(t *testing.T) {
	s := MustFromStruct(cfg{})
	for _, c := range []struct {
		name, toml string
		want       []string // one substring per error, in order; none: valid
	}{
		{"valid", `image = "x"
packages = ["a", "b"]
warm = 2
ratio = 1
debug = true
extra = [1, "mixed"]
[servers.a]
command = "c"
env = { K = "v" }
[[mounts]]
command = "m"`, nil},
		{"typo", `imgae = "x"`, []string{"p.config.imgae: unknown key (the plugin accepts debug, extra, image, mounts, packages, ratio, servers, warm)"}},
		{"wrong type", `warm = "two"`, []string{`p.config.warm: want an integer, got a string ("two")`}},
		{"float for an integer", `warm = 1.5`, []string{"p.config.warm: want an integer, got a number (1.5)"}},
		{"array element", `packages = ["a", 3]`, []string{"p.config.packages[1]: want a string, got an integer (3)"}},
		{"nested table key", "[servers.a]\ncommnd = \"c\"", []string{"p.config.servers.a.commnd: unknown key"}},
		{"nested map value", "[servers.a]\nenv = { K = 1 }", []string{"p.config.servers.a.env.K: want a string, got an integer (1)"}},
		{"array of tables", "[[mounts]]\ncommand = true", []string{"p.config.mounts[0].command: want a string, got a boolean (true)"}},
		{"table for a scalar", "[image]\nx = 1", []string{"p.config.image: want a string, got a table"}},
		{"core key", `max_output_bytes = 5`, []string{"p.config.max_output_bytes: unknown key"}},
		{"json dash", `Skipped = "x"`, []string{"p.config.Skipped: unknown key"}},
		{"every error, sorted", "warm = \"x\"\nimgae = 1", []string{"imgae: unknown", "warm: want"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			if _, err := toml.Decode(c.toml, &m); err != nil {
				t.Fatal(err)
			}
			errs := s.Validate("p.config", m)
			if len(errs) != len(c.want) {
				t.Fatalf("got %d errors %v, want %d %q", len(errs), errs, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d: %q does not contain %q", i, errs[i], w)
				}
			}
		})
	}
}

// A plugin that declares no schema (v1) has its table passed unchecked.
func TestNilSchema(t *testing.T) {
	var s *Schema
	if errs := s.Validate("p", map[string]any{"anything": 1}); errs != nil {
		t.Fatal(errs)
	}
}

func TestFromStructRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"not a struct", 3, "want a struct"},
		{"int map keys", struct {
			M map[int]string `json:"m"`
		}{}, "map keys must be strings"},
		{"nested arrays", struct {
			A [][]string `json:"a"`
		}{}, "nested arrays"},
		{"channel", struct {
			C chan int `json:"c"`
		}{}, "cannot come from TOML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := FromStruct(c.v); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
