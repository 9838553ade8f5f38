package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lilyformac/lily/engine/parse"
)

// Tool is a function the model may call.
type Tool struct {
	Name       string
	Parameters json.RawMessage // JSON Schema of the arguments object
}

// ToolMode says which calls the output must make.
type ToolMode int

const (
	// ToolsRequired: one or more calls of any tools and nothing else; the output starts at
	// <tool_call>.
	ToolsRequired ToolMode = iota
	// ToolsNamed: exactly one call of the named tool, whose "<tool_call>\n<function=NAME>\n" the
	// prompt already ends with: the output is its parameters, "</function>\n</tool_call>".
	ToolsNamed
	// ToolsAuto: free text with calls anywhere; the calls that open with <tool_call> are well formed.
	ToolsAuto
)

// The added tokens that open and close a call.
const (
	tokCall    = parse.CallOpen
	tokCallEnd = parse.CallEnd
)

// ToolCalls compiles the grammar of Qwen tool calls of tools in the given mode (name: the tool
// of ToolsNamed). A parameter whose schema engine/parse reads as a string (its first type other
// than null is string, or it has none) is raw text; any other is JSON of its schema.
func ToolCalls(tools []Tool, mode ToolMode, name string) (*Grammar, error) {
	g := &Grammar{}
	var root int32
	switch mode {
	case ToolsNamed:
		for _, t := range tools {
			if t.Name == name {
				body, err := toolBody(g, t)
				if err != nil {
					return nil, err
				}
				root = g.seq(body, g.special(tokCallEnd))
				return finishTools(g, root)
			}
		}
		return nil, fmt.Errorf("tool_choice names %q, which is not among the tools", name)
	case ToolsRequired, ToolsAuto:
		if len(tools) == 0 {
			return nil, fmt.Errorf("tool calls are required but no tools are given")
		}
		call, err := toolCall(g, tools)
		if err != nil {
			return nil, err
		}
		if mode == ToolsRequired {
			root = g.list(-1, call, g.lit("\n"), -1, 1, -1)
		} else {
			_, _, text := free()
			root = g.list(-1, g.choice(false, g.leaf(text), call), -1, -1, 0, -1)
		}
		return finishTools(g, root)
	}
	return nil, fmt.Errorf("unknown tool mode %d", mode)
}

func finishTools(g *Grammar, root int32) (*Grammar, error) {
	c := &compiler{g: g}
	return c.finish(root)
}

// toolCall is "<tool_call>\n<function=NAME>\n" BODY "</tool_call>" for any of tools.
func toolCall(g *Grammar, tools []Tool) (int32, error) {
	var fns []prop
	for _, t := range tools {
		if err := checkName("tool", t.Name); err != nil {
			return 0, err
		}
		body, err := toolBody(g, t)
		if err != nil {
			return 0, err
		}
		fns = append(fns, prop{name: t.Name, val: body, suffix: -1})
	}
	sw, err := g.object(fns, func(n string) string { return n + ">\n" }, false, "", -1, -1, true)
	if err != nil {
		return 0, err
	}
	return g.seq(g.special(tokCall), g.lit("\n"+parse.FuncOpen), sw, g.special(tokCallEnd)), nil
}

// checkName refuses names engine/parse would not read back inside <function=…> or <parameter=…>.
func checkName(what, name string) error {
	if name == "" || len(name) > 200 || strings.ContainsAny(name, " \t\r\n\f\v<>") {
		return fmt.Errorf("%s name %q cannot be written in a tool call (empty, over 200 bytes, or with white space, '<' or '>')", what, name)
	}
	return nil
}

// toolBody is the parameters of one call, "<parameter=K>\nVALUE\n</parameter>\n" each, then
// "</function>\n".
func toolBody(g *Grammar, t Tool) (int32, error) {
	params := bytes.TrimSpace(t.Parameters)
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	c := &compiler{g: g, doc: params, refs: map[string]int32{}, anys: map[string]int32{}}
	where := "tool " + t.Name + ": #"
	s, err := c.parse(params, where)
	if err != nil {
		return 0, err
	}
	if other := s.constraints("type", "properties", "required", "additionalProperties"); len(other) > 0 {
		return 0, fmt.Errorf("%s: parameters schema with %s is not supported (an object with properties is)", where, strings.Join(other, ", "))
	}
	var names []member
	if raw, ok := s.m["properties"]; ok {
		if names, err = members(raw); err != nil {
			return 0, fmt.Errorf("%s: properties must be an object", where)
		}
	}
	var required []string
	if raw, ok := s.m["required"]; ok && json.Unmarshal(raw, &required) != nil {
		return 0, fmt.Errorf("%s: required must be an array of strings", where)
	}
	var props []prop
	for _, m := range names {
		p, err := c.param(m, where+"/properties/"+m.key, required)
		if err != nil {
			return 0, err
		}
		props = append(props, p)
	}
	for _, r := range required {
		found := false
		for _, p := range props {
			found = found || p.name == r
		}
		if !found {
			return 0, fmt.Errorf("%s: required parameter %q has no schema in properties", where, r)
		}
	}
	return g.object(props, func(n string) string { return parse.ParamOpen + n + ">\n" }, false, parse.FuncEnd+"\n", -1, -1, false)
}

// param compiles one parameter's value the way engine/parse converts it back.
func (c *compiler) param(m member, where string, required []string) (prop, error) {
	if err := checkName("parameter", m.key); err != nil {
		return prop{}, fmt.Errorf("%s: %v", where, err)
	}
	md := mode{types: tString, raw: true}
	suffix := "\n"
	switch parse.ValueKind(m.val) {
	case "integer":
		md = mode{types: tInteger | tNull}
	case "number":
		md = mode{types: tNumber | tInteger | tNull}
	case "boolean":
		md = mode{types: tBoolean | tNull}
	case "object", "array":
		md = mode{types: tAll}
	}
	if !md.raw {
		suffix = paramEnd + "\n"
	}
	v, err := c.compile(m.val, where, md)
	if err != nil {
		return prop{}, err
	}
	req := false
	for _, r := range required {
		req = req || r == m.key
	}
	return prop{name: m.key, val: v, suffix: c.g.lit(suffix), required: req}, nil
}
