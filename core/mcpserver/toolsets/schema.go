package toolsets

import (
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// Schema infers T's JSON schema and makes it portable: every property has
// exactly one type. Inference types slices and pointers as ["null", X]; this
// server never sends null (an optional field is omitted, see the omitempty
// and omitzero tags) and clients omit what they do not set, so X is the
// whole truth. A property without a type is a programming error, except the
// values of a free-form object (additionalProperties), which may be anything.
func Schema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err == nil {
		err = portable(s, "", false)
	}
	if err != nil {
		panic(fmt.Sprintf("schema of %T: %v", *new(T), err))
	}
	return s
}

func portable(s *jsonschema.Schema, path string, free bool) error {
	if len(s.Types) > 0 {
		var types []string
		for _, t := range s.Types {
			if t != "null" {
				types = append(types, t)
			}
		}
		if len(types) != 1 {
			return fmt.Errorf("%s: types %v: want exactly one besides null", path, s.Types)
		}
		s.Type, s.Types = types[0], nil
	}
	if s.Type == "" && !free {
		return fmt.Errorf("%s: no type", path)
	}
	for name, p := range s.Properties {
		if err := portable(p, path+"."+name, false); err != nil {
			return err
		}
	}
	if s.Items != nil {
		if err := portable(s.Items, path+"[]", false); err != nil {
			return err
		}
	}
	if ap := s.AdditionalProperties; ap != nil && ap.Not == nil { // Not: the "false" schema of a closed struct
		if err := portable(ap, path+"{}", true); err != nil {
			return err
		}
	}
	return nil
}
