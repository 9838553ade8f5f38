package parse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool is a function the model may call.
type Tool struct {
	Name       string
	Parameters json.RawMessage // JSON schema of the function's parameters
}

// ToolsFromOpenAI reads an OpenAI "tools" array:
// [{"type":"function","function":{"name":…,"parameters":{…}}}]. The flat
// Responses-API form {"type":"function","name":…,"parameters":{…}} is accepted
// too. A missing or null array gives no tools.
func ToolsFromOpenAI(raw json.RawMessage) ([]Tool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var entries []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &entries) != nil {
		return nil, fmt.Errorf("tools: must be a JSON array")
	}
	tools := make([]Tool, 0, len(entries))
	seen := map[string]bool{}
	for i, e := range entries {
		var t struct {
			Type     *string `json:"type"`
			Function *struct {
				Name       *string         `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
			Name       *string         `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if e[0] != '{' {
			return nil, fmt.Errorf("tools[%d]: must be an object", i)
		}
		if err := json.Unmarshal(e, &t); err != nil {
			return nil, fmt.Errorf("tools[%d]: %v", i, err)
		}
		if t.Type == nil || *t.Type != "function" {
			if t.Type == nil {
				return nil, fmt.Errorf(`tools[%d]: missing "type" (want "function")`, i)
			}
			return nil, fmt.Errorf(`tools[%d]: unsupported type %q (only "function")`, i, *t.Type)
		}
		name, params := t.Name, t.Parameters
		if t.Function != nil {
			name, params = t.Function.Name, t.Function.Parameters
		} else if name == nil {
			return nil, fmt.Errorf(`tools[%d]: missing "function"`, i)
		}
		switch {
		case name == nil || *name == "":
			return nil, fmt.Errorf("tools[%d]: missing function name", i)
		case strings.ContainsAny(*name, " \t\r\n<>"):
			// The model writes <function=NAME>: such a name could not be called.
			return nil, fmt.Errorf("tools[%d]: function name %q has whitespace or '<', '>'", i, *name)
		case seen[*name]:
			return nil, fmt.Errorf("tools[%d]: duplicate function name %q", i, *name)
		}
		seen[*name] = true
		if len(params) > 0 && string(params) == "null" {
			params = nil
		}
		if len(params) > 0 && params[0] != '{' {
			return nil, fmt.Errorf("tools[%d] (%s): parameters must be a JSON object", i, *name)
		}
		tools = append(tools, Tool{Name: *name, Parameters: params})
	}
	return tools, nil
}

// paramTypes indexes the schema types of every tool's parameters.
func paramTypes(tools []Tool) map[string]map[string][]string {
	m := make(map[string]map[string][]string, len(tools))
	for _, t := range tools {
		var sch struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(t.Parameters, &sch) != nil {
			continue
		}
		p := make(map[string][]string, len(sch.Properties))
		for k, v := range sch.Properties {
			p[k] = schemaTypes(v)
		}
		m[t.Name] = p
	}
	return m
}

// schemaTypes returns a schema's "type" (a name or a list), including those
// of its anyOf/oneOf branches (Optional[...] in pydantic is anyOf with null).
func schemaTypes(raw json.RawMessage) []string {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	var one string
	var ts []string
	if json.Unmarshal(s.Type, &one) == nil {
		ts = []string{one}
	} else {
		json.Unmarshal(s.Type, &ts) // not a list either: no type
	}
	for _, b := range append(s.AnyOf, s.OneOf...) {
		ts = append(ts, schemaTypes(b)...)
	}
	return ts
}
