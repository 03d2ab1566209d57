// Package loader reads forge.toml into a config.Config: the defaults, the
// file, ${VAR} substitution, FORGE_* environment overrides and the tenants
// file, each size parsed once, then config.Validate; every problem is
// returned at once, each with its field path.
package loader

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// EnvPrefix marks environment variables that override configuration fields:
// FORGE_EXECUTION_MAX_TIMEOUT sets execution.max_timeout.
const EnvPrefix = "FORGE_"

// Load returns the effective configuration: defaults, then the file at path
// (skipped when path is empty), then FORGE_* overrides, then validation.
func Load(path string) (config.Config, error) { return LoadWith(path, os.LookupEnv) }

// LoadWith is Load with an explicit environment, for tests.
func LoadWith(path string, env config.Lookup) (config.Config, error) {
	raw := toRaw(config.DefaultFor(os.Geteuid(), env))
	var errs config.Errors
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return config.DefaultFor(os.Geteuid(), env), fmt.Errorf("read config: %w", err)
		}
		unknown, err := decode(string(data), raw.Interface())
		if err != nil {
			cfg, _ := parseRaw(raw)
			return cfg, fmt.Errorf("%s: %w", path, err)
		}
		errs = unknown
	}
	return finish(raw, errs, env)
}

// finish substitutes variables, applies overrides, parses the sizes and
// validates the raw configuration, returning every error found alongside
// those already collected.
func finish(raw reflect.Value, errs config.Errors, env config.Lookup) (config.Config, error) {
	errs = append(errs, substitute(raw.Elem(), "", env)...)
	errs = append(errs, applyEnv(raw.Elem(), "", env)...)
	errs = append(errs, mergeTenantsFile(raw.Elem())...)
	cfg, sizeErrs := parseRaw(raw)
	errs = append(errs, sizeErrs...)
	// A size that did not parse is 0 now: config.Validate would call it empty too.
	failed := map[string]bool{}
	for _, e := range sizeErrs {
		failed[e.Path] = true
	}
	for _, e := range config.Validate(cfg) {
		if !failed[e.Path] {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return cfg, errs
	}
	return cfg, nil
}

// decode returns unknown keys as field errors and syntax or type errors as
// a plain error (the rest of the file cannot be trusted then).
func decode(text string, cfg any) (config.Errors, error) {
	md, err := toml.Decode(text, cfg)
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			line := perr.Position.Line
			if line < 1 { // toml says line 0 for a backslash at the end of the input
				line = 1 + strings.Count(text[:min(perr.Position.Start, len(text))], "\n")
			}
			return nil, fmt.Errorf("line %d: %s", line, perr.Message)
		}
		return nil, err
	}
	var errs config.Errors
	// The decoder silently drops a value that is not a table where the
	// configuration has a map (e.g. the pre-table default_backend = "python").
	for _, k := range md.Keys() {
		if isMap(reflect.TypeOf(cfg).Elem(), k) && md.Type(k...) != "Hash" {
			errs = append(errs, config.FieldError{Path: k.String(), Msg: fmt.Sprintf("must be a table ([%s] with one key per entry), not a %s", k.String(), strings.ToLower(md.Type(k...)))})
		}
	}
	// The decoder also matches keys case-insensitively: [Server] would fill
	// [server], and with both in one file which wins is the decoder's map
	// order. Keys are lower case: anything else is refused.
	for _, k := range md.Keys() {
		if at, want, ok := caseMismatch(reflect.TypeOf(cfg).Elem(), k); ok {
			errs = append(errs, config.FieldError{Path: k.String(), Msg: fmt.Sprintf("%q: keys are case-sensitive; write %q", at, want)})
		}
	}
	for _, k := range md.Undecoded() {
		// Plugin config tables are free-form: the plugin validates them.
		if len(k) >= 3 && k[0] == "plugins" && k[2] == "config" {
			continue
		}
		errs = append(errs, config.FieldError{Path: k.String(), Msg: "unknown key (check the spelling against forge.toml.example)"})
	}
	return errs, nil
}

// caseMismatch finds a name on path that names a field of the
// configuration only when case is ignored (map keys are free).
func caseMismatch(t reflect.Type, path []string) (at, want string, bad bool) {
	for _, name := range path {
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTOML(t, name)
			if !ok {
				for i := 0; i < t.NumField(); i++ {
					if n := tomlName(t.Field(i)); strings.EqualFold(n, name) {
						return name, n, true
					}
				}
				return "", "", false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return "", "", false
		}
	}
	return "", "", false
}

// isMap reports whether the field at path is a map.
func isMap(t reflect.Type, path []string) bool {
	for i, name := range path {
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTOML(t, name)
			if !ok {
				return false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return false
		}
		if i == len(path)-1 {
			return t.Kind() == reflect.Map
		}
	}
	return false
}

func fieldByTOML(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		if tomlName(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// substitute replaces ${VAR} in every string reachable from v. A missing
// variable is an error naming the variable and the field.
func substitute(v reflect.Value, path string, env config.Lookup) config.Errors {
	var errs config.Errors
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			errs = append(errs, substitute(v.Field(i), join(path, tomlName(t.Field(i))), env)...)
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			elem := reflect.New(v.Type().Elem()).Elem()
			elem.Set(v.MapIndex(k))
			errs = append(errs, substitute(elem, join(path, k.String()), env)...)
			v.SetMapIndex(k, elem)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			errs = append(errs, substitute(v.Index(i), fmt.Sprintf("%s[%d]", path, i), env)...)
		}
	case reflect.Interface:
		if v.IsNil() {
			return nil
		}
		inner := reflect.New(v.Elem().Type()).Elem()
		inner.Set(v.Elem())
		errs = append(errs, substitute(inner, path, env)...)
		v.Set(inner)
	case reflect.String:
		s, err := expand(v.String(), env)
		if err != nil {
			errs = append(errs, config.FieldError{Path: path, Msg: err.Error()})
		} else {
			v.SetString(s)
		}
	}
	return errs
}

// expand substitutes ${VAR} references. Only the braced form is a
// reference ($VAR and $$ are left as written: passwords contain dollars).
func expand(s string, env config.Lookup) (string, error) {
	var missing, invalid []string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		return os.Expand(m, func(name string) string {
			val, ok := env(name)
			if !ok {
				missing = append(missing, name)
			} else if !utf8.ValidString(val) {
				invalid = append(invalid, name)
			}
			return val
		})
	})
	if len(missing) > 0 {
		return s, fmt.Errorf("environment variable %s is not set (referenced as ${%s}); set it or remove the reference", missing[0], missing[0])
	}
	if len(invalid) > 0 {
		return s, fmt.Errorf("environment variable %s (referenced as ${%s}) is not valid UTF-8", invalid[0], invalid[0])
	}
	return out, nil
}

// applyEnv sets scalar and list fields from FORGE_<PATH> variables. Maps
// (mcp_tools, plugins, templates) are only configurable in the file.
func applyEnv(v reflect.Value, path string, env config.Lookup) config.Errors {
	var errs config.Errors
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := v.Field(i)
		p := join(path, tomlName(t.Field(i)))
		if f.Kind() == reflect.Struct {
			errs = append(errs, applyEnv(f, p, env)...)
			continue
		}
		name := EnvPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		raw, ok := env(name)
		if !ok {
			continue
		}
		// A TOML file cannot hold invalid UTF-8; neither may an override.
		if !utf8.ValidString(raw) {
			errs = append(errs, config.FieldError{Path: p, Msg: fmt.Sprintf("from %s: the value is not valid UTF-8", name)})
			continue
		}
		if err := setScalar(f, raw); err != nil {
			errs = append(errs, config.FieldError{Path: p, Msg: fmt.Sprintf("from %s: %v", name, err)})
		}
	}
	return errs
}

func setScalar(f reflect.Value, raw string) error {
	switch f.Kind() {
	case reflect.String:
		f.SetString(raw)
	case reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
		}
		f.SetInt(int64(n))
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		f.SetBool(b)
	case reflect.Slice:
		if f.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("a list of tables is only configurable in the file")
		}
		var items []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}

func tomlName(f reflect.StructField) string {
	if n, _, _ := strings.Cut(f.Tag.Get("toml"), ","); n != "" {
		return n
	}
	return strings.ToLower(f.Name)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
