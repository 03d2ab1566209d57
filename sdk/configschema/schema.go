// Package configschema describes the keys a plugin accepts in its
// [plugins.NAME.config] table, and checks an operator's table against
// them. A plugin declares its schema with a Go struct (the one it decodes
// its configuration into: plugin.Info.Config); the core refuses, at start-up
// and in `mcp-forge config check`, an unknown key or a value of the wrong
// type, naming the key's path (plugins.python.config.imgae).
package configschema

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// Type is the type of a configuration value, as TOML writes it.
type Type int

// The types a key can have.
const (
	Any Type = iota // anything: the plugin checks it
	String
	Integer
	Float // an integer is accepted too
	Bool
	Array // of Elem
	Table // with Fields
	Map   // any key, each value of Elem (a Table of Fields if Elem is Table)
)

var typeNames = [...]string{"any value", "a string", "an integer", "a number", "a boolean", "an array", "a table", "a table"}

func (t Type) String() string {
	if t < 0 || int(t) >= len(typeNames) {
		return fmt.Sprintf("type %d", int(t))
	}
	return typeNames[t]
}

// Field is one key.
type Field struct {
	Name   string
	Type   Type
	Elem   Type    // of an Array or a Map
	Fields []Field // of a Table, or of each value of an Array or Map of tables
}

// Schema is the keys of a plugin's configuration table. A nil *Schema means
// the plugin declared none (a plugin API v1 plugin): its table is not
// checked.
type Schema struct {
	Fields []Field
}

// CoreTag marks a field the core sets (core/forge/pluginset.Settings:
// output limits, container defaults; a bridge's servers): `forge:"core"`.
// It is left out of the schema, so an operator who writes it in
// [plugins.NAME.config] is told where it is really set rather than
// silently overriding the core.
const CoreTag = "core"

// FromStruct derives a schema from v, a struct (or pointer to one) decoded
// from JSON: each exported field is a key named by its json tag (or its
// name), embedded structs contribute their fields, fields tagged
// `json:"-"` or `forge:"core"` are left out.
func FromStruct(v any) (*Schema, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("config schema: want a struct, got %T", v)
	}
	fields, err := structFields(t)
	if err != nil {
		return nil, err
	}
	return &Schema{Fields: fields}, nil
}

// MustFromStruct is FromStruct for package-level declarations, which
// cannot fail at run time once they work.
func MustFromStruct(v any) *Schema {
	s, err := FromStruct(v)
	if err != nil {
		panic(err)
	}
	return s
}

var durationType = reflect.TypeOf(time.Duration(0))

func structFields(t reflect.Type) ([]Field, error) {
	var out []Field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := deref(f.Type)
		// As encoding/json: an embedded struct's fields are promoted, even
		// when its type is unexported.
		embedded := f.Anonymous && name == "" && ft.Kind() == reflect.Struct
		if (!f.IsExported() && !embedded) || name == "-" || f.Tag.Get("forge") == CoreTag {
			continue
		}
		if embedded {
			sub, err := structFields(ft)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		typ, elem, sub, err := typeOf(ft)
		if err != nil {
			return nil, fmt.Errorf("config schema: field %s.%s: %w", t.Name(), f.Name, err)
		}
		out = append(out, Field{Name: name, Type: typ, Elem: elem, Fields: sub})
	}
	return out, nil
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// typeOf maps a Go type to a schema type, the element type of a container
// and the fields of a table (its own, or its elements').
func typeOf(t reflect.Type) (typ, elem Type, fields []Field, err error) {
	t = deref(t)
	if t == durationType {
		return 0, 0, nil, fmt.Errorf("time.Duration decodes from a JSON integer of nanoseconds: use a string (\"30s\") or seconds")
	}
	switch t.Kind() {
	case reflect.String:
		return String, 0, nil, nil
	case reflect.Bool:
		return Bool, 0, nil, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Integer, 0, nil, nil
	case reflect.Float32, reflect.Float64:
		return Float, 0, nil, nil
	case reflect.Interface:
		return Any, 0, nil, nil
	case reflect.Struct:
		fields, err := structFields(t)
		return Table, 0, fields, err
	case reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Map && t.Key().Kind() != reflect.String {
			return 0, 0, nil, fmt.Errorf("map keys must be strings, not %s", t.Key())
		}
		e, ee, fields, err := typeOf(t.Elem())
		if err != nil {
			return 0, 0, nil, err
		}
		if e == Array || e == Map || ee != 0 {
			return 0, 0, nil, fmt.Errorf("nested arrays and maps are not described: use a struct")
		}
		if t.Kind() == reflect.Map {
			return Map, e, fields, nil
		}
		return Array, e, fields, nil
	}
	return 0, 0, nil, fmt.Errorf("%s cannot come from TOML", t)
}

// Validate checks table (decoded from TOML: string, int64, float64, bool,
// time.Time, []any, []map[string]any, map[string]any) against s. Each
// error names the key's full path, prefix first (plugins.NAME.config).
func (s *Schema) Validate(prefix string, table map[string]any) []error {
	if s == nil {
		return nil
	}
	return checkTable(prefix, s.Fields, table)
}

func checkTable(path string, fields []Field, table map[string]any) []error {
	var errs []error
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		i := slices.IndexFunc(fields, func(f Field) bool { return f.Name == k })
		if i < 0 {
			errs = append(errs, fmt.Errorf("%s.%s: unknown key (the plugin accepts %s)", path, k, known(fields)))
			continue
		}
		f := fields[i]
		errs = append(errs, checkValue(path+"."+k, f.Type, f.Elem, f.Fields, table[k])...)
	}
	return errs
}

func known(fields []Field) string {
	if len(fields) == 0 {
		return "no key: remove the table"
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func checkValue(path string, typ, elem Type, fields []Field, v any) []error {
	wrong := func() []error {
		return []error{fmt.Errorf("%s: want %s, got %s", path, typ, describe(v))}
	}
	switch typ {
	case Any:
		return nil
	case String:
		if _, ok := v.(string); !ok {
			return wrong()
		}
	case Integer:
		if !isInt(v) {
			return wrong()
		}
	case Float:
		if _, ok := v.(float64); !ok && !isInt(v) {
			return wrong()
		}
	case Bool:
		if _, ok := v.(bool); !ok {
			return wrong()
		}
	case Table:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		return checkTable(path, fields, m)
	case Array:
		rv := reflect.ValueOf(v)
		if v == nil || rv.Kind() != reflect.Slice {
			return wrong()
		}
		var errs []error
		for i := 0; i < rv.Len(); i++ {
			errs = append(errs, checkValue(fmt.Sprintf("%s[%d]", path, i), elem, 0, fields, rv.Index(i).Interface())...)
		}
		return errs
	case Map:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong()
		}
		var errs []error
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			errs = append(errs, checkValue(path+"."+k, elem, 0, fields, m[k])...)
		}
		return errs
	}
	return nil
}

func isInt(v any) bool {
	switch v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	}
	return false
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("a string (%.40q)", x)
	case bool:
		return fmt.Sprintf("a boolean (%v)", x)
	case float64:
		return fmt.Sprintf("a number (%v)", x)
	case time.Time:
		return "a date-time"
	case map[string]any:
		return "a table"
	}
	if isInt(v) {
		return fmt.Sprintf("an integer (%v)", v)
	}
	if reflect.ValueOf(v).Kind() == reflect.Slice {
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}
