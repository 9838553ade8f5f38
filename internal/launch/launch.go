// Package launch is the one place that knows how the agent CLIs Lily can start (Claude Code,
// Codex CLI, opencode and Qwen Code) are pointed at a Lily server: their environment variables and
// arguments, with none of the client's own files written. `lily launch` runs a client with them or
// prints them; the menu-bar app's "Use with…" setups show the same lines.
package launch

import (
	"slices"
	"strings"
)

// DefaultURL is where `lily serve` listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:8000"

// DefaultContext is Qwen3.6-35B-A3B's context window, used when the server has not said its own.
const DefaultContext = 262144

// NoKey is the key sent by clients that insist on one when Lily needs none.
const NoKey = "lily"

// Target is the server a client is pointed at.
type Target struct {
	URL     string // the root URL, without /v1 (see RootURL)
	Model   string // the id the server reports
	Context int    // the server's context window; 0: unknown (DefaultContext)
	Key     string // the API key; "" when the server needs none, or when only KeyEnv is known
	KeyEnv  string // the variable holding the key: shell lines write "$KeyEnv", never the key itself
}

func (t Target) apiURL() string { return t.URL + "/v1" }

func (t Target) context() int {
	if t.Context > 0 {
		return t.Context
	}
	return DefaultContext
}

func (t Target) hasKey() bool { return t.Key != "" || t.KeyEnv != "" }

// keyVar sets name to the API key, or to NoKey for a client that wants one set regardless.
func (t Target) keyVar(name string) Var {
	switch {
	case t.KeyEnv != "":
		return Var{Name: name, Value: t.Key, Shell: `"$` + t.KeyEnv + `"`}
	case t.Key != "":
		return Var{Name: name, Value: t.Key}
	}
	return Var{Name: name, Value: NoKey, Why: "Lily needs no key, but the client wants one set"}
}

// RootURL normalizes a server address as users type it (with or without http://, /v1 or a
// trailing slash) to the root URL.
func RootURL(u string) string {
	u = strings.TrimRight(strings.TrimSpace(u), "/")
	u = strings.TrimRight(strings.TrimSuffix(u, "/v1"), "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// Var is one environment variable of a setup.
type Var struct {
	Name  string
	Value string // what the client gets
	Shell string // how shell lines write the value; "": Quote(Value)
	Why   string // a comment for the shell lines; "": none
}

// Setup is how to start one client against one server.
type Setup struct {
	Client Client
	Env    []Var
	Args   []string
}

// Client is an agent CLI that Lily can start.
type Client struct {
	Name    string // its command, and the argument of `lily launch`
	Title   string // its product name
	Package string // the npm package that installs it
	setup   func(Target) Setup
}

var clients = []Client{
	{Name: "claude", Title: "Claude Code", Package: "@anthropic-ai/claude-code", setup: claude},
	{Name: "codex", Title: "Codex CLI", Package: "@openai/codex", setup: codex},
	{Name: "opencode", Title: "opencode", Package: "opencode-ai", setup: opencode},
	{Name: "qwen", Title: "Qwen Code", Package: "@qwen-code/qwen-code", setup: qwen},
}

// Names lists the clients' names, in the order the menu shows them.
func Names() []string {
	names := make([]string, len(clients))
	for i, c := range clients {
		names[i] = c.Name
	}
	return names
}

// Lookup finds a client by name.
func Lookup(name string) (Client, bool) {
	i := slices.IndexFunc(clients, func(c Client) bool { return c.Name == name })
	if i < 0 {
		return Client{}, false
	}
	return clients[i], true
}

// Setup points the client at t; extra arguments follow Lily's.
func (c Client) Setup(t Target, extra ...string) Setup {
	s := c.setup(t)
	s.Client = c
	s.Args = append(s.Args, extra...)
	return s
}

// Environ is base with the setup's variables in place of any of the same names.
func (s Setup) Environ(base []string) []string {
	env := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(s.Env, func(v Var) bool { return v.Name == name })
	})
	for _, v := range s.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	return env
}
