package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// parseEnv reads the fuzzer's environment: one NAME=VALUE per line.
func parseEnv(s string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// syntaxLine is how a file that cannot be decoded is reported: the file, then
// the line of the problem (a parse error, or a type mismatch that names the
// key after it).
var syntaxLine = regexp.MustCompile(`line ([1-9][0-9]*)\b`)

// FuzzLoadWith loads arbitrary TOML with arbitrary environment overrides.
// An operator must always get either a configuration that validates, or
// errors that say where the problem is: a field path for each problem, or
// the line of a file that cannot be decoded.
func FuzzLoadWith(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text, envText string) {
		path := filepath.Join(dir, "forge.toml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		env := parseEnv(envText)
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

		cfg, err := LoadWith(path, lookup)

		// Loading is a function of the file and the environment: the same
		// input gives the same configuration and the same error text (map
		// iteration must never leak into the order of errors).
		cfg2, err2 := LoadWith(path, lookup)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("two loads of the same input differ:\n%v\n---\n%v", err, err2)
		}
		// Printed, not DeepEqual: a plugin config may hold NaN, or a time with a
		// zone that each decode allocates anew.
		if a, b := fmt.Sprintf("%v", cfg), fmt.Sprintf("%v", cfg2); err == nil && a != b {
			t.Fatalf("two loads of the same input give different configurations:\n%s\n%s", a, b)
		}

		if err != nil {
			checkLoadError(t, path, text, err)
			return
		}
		if errs := config.Validate(cfg); len(errs) > 0 {
			t.Fatalf("a successful load does not validate: %v", errs)
		}
		checkEnvApplied(t, reflect.ValueOf(cfg), "", env)
		checkRenderFixedPoint(t, dir, cfg)
	})
}

func checkLoadError(t *testing.T, path, text string, err error) {
	t.Helper()
	var errs config.Errors
	if errors.As(err, &errs) {
		if len(errs) == 0 {
			t.Fatal("an empty config.Errors was returned as an error")
		}
		for _, e := range errs {
			if strings.TrimSpace(e.Path) == "" || strings.TrimSpace(e.Msg) == "" {
				t.Fatalf("field error without a path or a message: %#v", e)
			}
		}
		return
	}
	msg := err.Error()
	m := syntaxLine.FindStringSubmatch(msg)
	if !strings.HasPrefix(msg, path+": ") || m == nil {
		t.Fatalf("a decode error must name the file and the line: %q", msg)
	}
	if n, _ := strconv.Atoi(m[1]); n > strings.Count(text, "\n")+1 {
		t.Fatalf("error %q names a line after the end of the file", msg)
	}
}

// checkEnvApplied: every FORGE_<PATH> variable that names a scalar or list
// field wins over the file in a successful load.
func checkEnvApplied(t *testing.T, v reflect.Value, path string, env map[string]string) {
	t.Helper()
	tp := v.Type()
	for i := 0; i < tp.NumField(); i++ {
		f := v.Field(i)
		p := join(path, tomlName(tp.Field(i)))
		if f.Kind() == reflect.Struct {
			checkEnvApplied(t, f, p, env)
			continue
		}
		name := EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		raw, ok := env[name]
		if !ok {
			continue
		}
		var want any
		switch {
		case f.Type() == sizeType:
			var s config.Size
			if err := s.UnmarshalText([]byte(raw)); err != nil {
				t.Fatalf("%s=%q is not a size, yet the load succeeded", name, raw)
			}
			want = s
		case f.Kind() == reflect.String:
			want = raw
		case f.Kind() == reflect.Int:
			n, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil {
				t.Fatalf("%s=%q is not an integer, yet the load succeeded", name, raw)
			}
			want = n
		case f.Kind() == reflect.Bool:
			b, err := strconv.ParseBool(strings.TrimSpace(raw))
			if err != nil {
				t.Fatalf("%s=%q is not a bool, yet the load succeeded", name, raw)
			}
			want = b
		case f.Kind() == reflect.Slice:
			var items []string
			for _, s := range strings.Split(raw, ",") {
				if s = strings.TrimSpace(s); s != "" {
					items = append(items, s)
				}
			}
			want = items
		default:
			continue // maps are file-only
		}
		if got := f.Interface(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s=%q: %s is %#v, want %#v", name, raw, p, got, want)
		}
	}
}

// checkRenderFixedPoint: what `config print` shows, loaded back, is the same
// effective configuration (when nothing was masked and no value looks like a
// ${VAR} reference that a second load would expand).
func checkRenderFixedPoint(t *testing.T, dir string, cfg config.Config) {
	t.Helper()
	out, err := config.Render(cfg)
	if err != nil {
		t.Fatalf("render a valid configuration: %v", err)
	}
	if strings.Contains(out, "${") || strings.Contains(out, `"***"`) {
		return
	}
	path := filepath.Join(dir, "rendered.toml")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := LoadWith(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("the rendered configuration does not load: %v\n%s", err, out)
	}
	again, err := config.Render(back)
	if err != nil {
		t.Fatal(err)
	}
	if again != out {
		t.Fatalf("render → load → render changed the configuration:\n%s\n---\n%s", out, again)
	}
}
