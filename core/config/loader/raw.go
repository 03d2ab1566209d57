package loader

import (
	"fmt"
	"reflect"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// A configuration is loaded in its raw form: config.Config with every config.Size a
// string, as the file and the FORGE_* variables write it. Decoding,
// ${VAR} substitution and overrides then work on text as for any other
// field, and every size is parsed once, by parseRaw, into the config.Size the rest
// of the server reads. A malformed size is then one field error among all
// the others of the load (the decoder would stop at the first one), and a
// size may be written "${VAR}".

var (
	sizeType   = reflect.TypeFor[config.Size]()
	stringType = reflect.TypeFor[string]()
	rawConfig  = rawType(reflect.TypeFor[config.Config]())
)

// rawType is t with every config.Size field replaced by a string field of the same
// name and tag. Sizes are fields of structs only: one inside a map or a
// slice would have no raw form, and rawType panics (at package
// initialization, so that every test catches it).
func rawType(t reflect.Type) reflect.Type {
	switch {
	case t == sizeType:
		return stringType
	case t.Kind() == reflect.Struct:
		fields := make([]reflect.StructField, t.NumField())
		changed := false
		for i := range fields {
			f := t.Field(i)
			if rt := rawType(f.Type); rt != f.Type {
				f.Type, changed = rt, true
			}
			f.Index, f.Offset = nil, 0
			fields[i] = f
		}
		if !changed {
			return t
		}
		return reflect.StructOf(fields)
	case t.Kind() == reflect.Map || t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer || t.Kind() == reflect.Array:
		if rawType(t.Elem()) != t.Elem() {
			panic(fmt.Sprintf("config: %s holds a Size inside a %s; sizes must be struct fields", t, t.Kind()))
		}
	}
	return t
}

// toRaw is cfg in its raw form (a pointer to a value of rawConfig).
func toRaw(cfg config.Config) reflect.Value {
	raw := reflect.New(rawConfig)
	copyToRaw(raw.Elem(), reflect.ValueOf(cfg))
	return raw
}

func copyToRaw(dst, src reflect.Value) {
	switch {
	case src.Type() == sizeType:
		dst.SetString(src.Interface().(config.Size).String())
	case dst.Type() == src.Type():
		dst.Set(src)
	default: // a struct holding sizes
		for i := 0; i < src.NumField(); i++ {
			copyToRaw(dst.Field(i), src.Field(i))
		}
	}
}

// parseRaw is the config.Config of a raw configuration, with an error for every
// size that does not parse (that field is then 0).
func parseRaw(raw reflect.Value) (config.Config, config.Errors) {
	var cfg config.Config
	errs := copyFromRaw(reflect.ValueOf(&cfg).Elem(), raw.Elem(), "")
	return cfg, errs
}

func copyFromRaw(dst, src reflect.Value, path string) config.Errors {
	switch {
	case dst.Type() == sizeType:
		var s config.Size
		if err := s.UnmarshalText([]byte(src.String())); err != nil {
			return config.Errors{{Path: path, Msg: err.Error()}}
		}
		dst.Set(reflect.ValueOf(s))
	case dst.Type() == src.Type():
		dst.Set(src)
	default:
		var errs config.Errors
		for i := 0; i < dst.NumField(); i++ {
			errs = append(errs, copyFromRaw(dst.Field(i), src.Field(i), join(path, tomlName(dst.Type().Field(i))))...)
		}
		return errs
	}
	return nil
}
