package shim

import (
	"encoding/json"
	"fmt"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/configschema"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// mergeConfig is the configuration a plugin's factory gets: the core's
// settings with the operator's keys over them (as API v1 sent them, so a
// factory reads one table whatever the version).
func mergeConfig(core, operator []byte) (backend.Config, error) {
	if len(core) == 0 {
		return backend.Config(operator), nil
	}
	if len(operator) == 0 {
		return backend.Config(core), nil
	}
	var m, op map[string]json.RawMessage
	if err := json.Unmarshal(core, &m); err != nil {
		return nil, fmt.Errorf("the core's settings are not a JSON object: %w", err)
	}
	if err := json.Unmarshal(operator, &op); err != nil {
		return nil, fmt.Errorf("the configuration is not a JSON object: %w", err)
	}
	for k, v := range op {
		m[k] = v
	}
	out, err := json.Marshal(m)
	return backend.Config(out), err
}

var schemaTypes = map[configschema.Type]pb.ConfigType{
	configschema.Any:     pb.ConfigType_CONFIG_TYPE_UNSPECIFIED,
	configschema.String:  pb.ConfigType_CONFIG_TYPE_STRING,
	configschema.Integer: pb.ConfigType_CONFIG_TYPE_INTEGER,
	configschema.Float:   pb.ConfigType_CONFIG_TYPE_FLOAT,
	configschema.Bool:    pb.ConfigType_CONFIG_TYPE_BOOL,
	configschema.Array:   pb.ConfigType_CONFIG_TYPE_ARRAY,
	configschema.Table:   pb.ConfigType_CONFIG_TYPE_TABLE,
	configschema.Map:     pb.ConfigType_CONFIG_TYPE_MAP,
}

func schemaToPB(s *configschema.Schema) *pb.ConfigSchema {
	if s == nil {
		return nil
	}
	return &pb.ConfigSchema{Fields: fieldsToPB(s.Fields)}
}

func fieldsToPB(fs []configschema.Field) []*pb.ConfigField {
	out := make([]*pb.ConfigField, len(fs))
	for i, f := range fs {
		out[i] = &pb.ConfigField{Name: f.Name, Type: schemaTypes[f.Type], ElementType: schemaTypes[f.Elem], Fields: fieldsToPB(f.Fields)}
	}
	return out
}

func schemaFromPB(s *pb.ConfigSchema) *configschema.Schema {
	if s == nil {
		return nil
	}
	return &configschema.Schema{Fields: fieldsFromPB(s.Fields)}
}

// fieldsFromPB maps a type this SDK does not know (a newer plugin's) to
// Any: the core then leaves that value to the plugin rather than refusing a
// valid configuration.
func fieldsFromPB(fs []*pb.ConfigField) []configschema.Field {
	out := make([]configschema.Field, len(fs))
	for i, f := range fs {
		out[i] = configschema.Field{Name: f.Name, Type: typeFromPB(f.Type), Elem: typeFromPB(f.ElementType), Fields: fieldsFromPB(f.Fields)}
	}
	return out
}

func typeFromPB(t pb.ConfigType) configschema.Type {
	for k, v := range schemaTypes {
		if v == t {
			return k
		}
	}
	return configschema.Any
}
