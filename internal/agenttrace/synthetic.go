package agenttrace

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Options size a synthetic trace.
type Options struct {
	RepoFiles int // entries of the system prompt's repository map (≈ 30 tokens each)
	FileLines int // lines of each file a tool returns (≈ 12 tokens each)
	Turns     int // requests, at most the script's
	// Rewrite plays the rewriting script instead of the debugging one: the agent reads a file
	// and writes it back whole with a small edit (write_file), as agents do that rewrite rather
	// than patch, so its reply repeats text the prompt holds.
	Rewrite bool
}

// Default is the committed trace's size: a ~13k-token system prompt with 10 tools (as coding
// agents send), then 10 turns of tool calls and results.
var Default = Options{RepoFiles: 345, FileLines: 120, Turns: 10}

// Rewriting is the committed rewriting trace's size (testdata/agent/rewrite.json): a ~5k-token
// system prompt with the 10 tools, then 4 turns around one 120-line file read and rewritten.
var Rewriting = Options{RepoFiles: 40, FileLines: 120, Turns: 4, Rewrite: true}

// Synthetic builds a coding agent's conversation deterministically from o.
func Synthetic(o Options) *Trace {
	g := &gen{r: rand.New(rand.NewPCG(1, 2)), o: o}
	sc, what := script, "tool calls and results"
	if o.Rewrite {
		sc, what = rewriteScript, "a file read, then rewritten whole with a small edit"
	}
	sc = sc[:min(o.Turns, len(sc))]
	t := &Trace{Description: fmt.Sprintf("synthetic coding-agent session: system prompt with a %d-file repository map, %d tools, %d turns of %s (%d-line files)", o.RepoFiles, len(tools), len(sc), what, o.FileLines)}
	t.Tools, _ = json.Marshal(tools)
	for i, step := range sc {
		var turn Turn
		if i == 0 {
			turn.Messages = append(turn.Messages, msg("system", g.system()))
		}
		if step.user != "" {
			turn.Messages = append(turn.Messages, msg("user", step.user))
		} else {
			turn.Messages = append(turn.Messages, g.toolResult(i, sc[i-1]))
		}
		if step.rewrite {
			step.args = map[string]any{"path": step.args["path"], "content": rewritten(g.file)}
		}
		turn.Reply = reply(i, step)
		t.Turns = append(t.Turns, turn)
	}
	return t
}

type gen struct {
	r    *rand.Rand
	o    Options
	file string // the last file read_file returned
}

func msg(role, content string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": role, "content": content})
	return b
}

// step is one turn of the script: the user speaks, or the previous call's result comes back;
// the assistant answers with a call or, when call is empty, with text.
type step struct {
	user      string
	reasoning string
	call      string // tool name
	args      map[string]any
	text      string
	failing   bool // a run_shell call whose tests fail
	rewrite   bool // a write_file call whose content is the file last read, edited (rewritten)
}

func reply(i int, s step) json.RawMessage {
	m := map[string]any{"role": "assistant", "content": s.text, "reasoning_content": s.reasoning}
	if s.call != "" {
		args, _ := json.Marshal(s.args)
		m["tool_calls"] = []any{map[string]any{"id": fmt.Sprintf("call_%02d", i+1), "type": "function",
			"function": map[string]any{"name": s.call, "arguments": string(args)}}}
	}
	b, _ := json.Marshal(m)
	return b
}

// toolResult is what the tool returns for the call of step prev, made at turn i-1.
func (g *gen) toolResult(i int, prev step) json.RawMessage {
	var content string
	switch prev.call {
	case "grep":
		var b strings.Builder
		for k := range 12 {
			fmt.Fprintf(&b, "server/%s.go:%d:\tif err := s.%s(ctx, req); err != nil {\n", g.word(), 40+k*7, g.ident())
		}
		content = b.String()
	case "read_file":
		content = g.goFile()
		g.file = content
	case "run_shell":
		content = "ok  \tgithub.com/example/app/server\t0.398s\nok  \tgithub.com/example/app/store\t0.121s\n"
		if prev.failing {
			content = "--- FAIL: TestStreamUsage (0.02s)\n    stream_test.go:88: usage chunk missing: got 0 chunks with usage, want 1\nFAIL\nFAIL\tgithub.com/example/app/server\t0.412s\n"
		}
	default:
		content = "The file was updated successfully."
	}
	b, _ := json.Marshal(map[string]string{"role": "tool", "tool_call_id": fmt.Sprintf("call_%02d", i), "content": content})
	return b
}

var words = strings.Fields(`account adapter archive batch buffer cache catalog channel checkpoint client cluster codec
config context cursor daemon digest dispatch document encoder event export feature filter gateway graph handler
header index journal kernel ledger limit listener loader manifest marker metric mirror module monitor notice
offset packet parser payload pipeline planner policy pool profile prompt proxy queue quota reader record
registry render replica report request resolver router runner sampler schema scope session shard signal
snapshot socket source stream summary supervisor table template tenant ticket token trace tracker transport
upload vector version watcher window worker writer`)

func (g *gen) word() string { return words[g.r.IntN(len(words))] }

func (g *gen) ident() string {
	w := g.word()
	return strings.ToUpper(w[:1]) + w[1:] + strings.ToUpper(g.word()[:1]) + g.word()[1:]
}

func (g *gen) system() string {
	var b strings.Builder
	b.WriteString(systemIntro)
	b.WriteString("\n# Repository map\n\nThe repository you work in, one line per file with what it holds:\n\n")
	for range g.o.RepoFiles {
		fmt.Fprintf(&b, "- %s/%s_%s.go: the %s %s that %s each %s before the %s %s; see %s for how %s %s are %s.\n",
			g.word(), g.word(), g.word(), g.word(), g.word(), verbs[g.r.IntN(len(verbs))], g.word(), g.word(), g.word(),
			g.ident(), g.word(), g.word()+"s", []string{"retried", "cached", "merged", "rotated", "validated"}[g.r.IntN(5)])
	}
	b.WriteString("\n# Environment\n\nWorking directory: /home/dev/app\nPlatform: darwin (arm64)\nShell: zsh\nGo: 1.26\nIs a git repository: yes\nMain branch: main\n")
	return b.String()
}

var verbs = []string{"validates", "schedules", "encodes", "flushes", "retries", "indexes", "compacts", "routes", "signs", "throttles"}

func (g *gen) goFile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "package server\n\nimport (\n\t\"context\"\n\t\"errors\"\n\t\"net/http\"\n)\n\n")
	for n := 0; n < g.o.FileLines; {
		name := g.ident()
		fmt.Fprintf(&b, "// %s %s the %s for one %s.\nfunc (s *Server) %s(ctx context.Context, req *%sRequest) error {\n", name, verbs[g.r.IntN(len(verbs))], g.word(), g.word(), name, g.ident())
		fmt.Fprintf(&b, "\tif req == nil {\n\t\treturn errors.New(\"%s: nil request\")\n\t}\n", strings.ToLower(name))
		fmt.Fprintf(&b, "\tv, err := s.%s.%s(ctx, req.%s)\n\tif err != nil {\n\t\treturn err\n\t}\n", g.word(), g.ident(), g.ident())
		fmt.Fprintf(&b, "\ts.metrics.%s.Add(float64(len(v)))\n\treturn s.write(http.StatusOK, v)\n}\n\n", g.ident())
		n += 14
	}
	return b.String()
}

const systemIntro = `You are Lily Code, an interactive coding agent that helps users with software engineering tasks in their repository. Use the instructions below and the tools available to you to assist the user.

IMPORTANT: Assist with defensive security tasks only. Refuse to create, modify, or improve code that may be used maliciously. Never generate or guess URLs for the user unless you are confident that the URLs help the user with programming.

# Tone and style

Be concise, direct, and to the point. When you run a non-trivial command, explain what it does and why you are running it, especially when it changes the user's system. Your output is displayed in a terminal with Markdown rendering. Communicate with the user in text; never use tools or code comments as a means to communicate. If you cannot or will not help with something, do not explain why at length; offer helpful alternatives if possible, and keep the answer to one or two sentences. Answer with fewer than four lines of text unless the user asks for detail. Avoid introductions, conclusions and summaries of what you just did unless asked.

# Proactiveness

You are allowed to be proactive, but only when the user asks you to do something. Do the right thing when asked, including follow-up actions, and do not surprise the user with actions they did not ask for. If the user asks how to approach something, answer the question first, and do not jump into making changes.

# Following conventions

When making changes to files, first understand the file's code conventions. Mimic code style, use existing libraries and utilities, and follow existing patterns. Never assume that a given library is available, even if it is well known: check that this codebase already uses it (look at neighbouring files, or the go.mod, package.json, Cargo.toml). When you create a new component, look at existing components first; when you edit code, look at its surrounding context, especially its imports, to understand the choice of frameworks and libraries. Always follow security best practices; never introduce code that exposes or logs secrets and keys, and never commit secrets or keys to the repository.

# Code style

Do not add comments to the code you write unless the user asks you to, or the code is complex and requires additional context. Keep functions short and names meaningful. Handle every error. Prefer the standard library.

# Task management

You have access to the todo_write tool to help you manage and plan tasks. Use it very frequently to make sure you are tracking your tasks and giving the user visibility into your progress. It is also extremely helpful for planning, and for breaking larger complex tasks down into smaller steps. Mark todos as completed as soon as you are done with a task; do not batch up several tasks before marking them as completed.

# Doing tasks

The user will primarily request you to perform software engineering tasks: solving bugs, adding functionality, refactoring code, explaining code. For these tasks the following steps are recommended:
- Use the todo_write tool to plan the task if required.
- Use the search tools to understand the codebase and the user's query. Use them extensively, both in parallel and sequentially.
- Implement the solution using all tools available to you.
- Verify the solution with tests if possible. Never assume a specific test framework or test script: check the README or search the codebase to find the testing approach.
- When you have completed a task, run the lint and typecheck commands (for example go vet, npm run lint, ruff) if they were provided to you, to ensure your code is correct.
Never commit changes unless the user explicitly asks you to.

# Tool usage policy

When doing a file search, prefer the task tool to reduce context usage. You can call multiple tools in a single response: when several independent pieces of information are requested, batch your tool calls together for optimal performance. When making multiple shell calls, send a single message with multiple tool calls to run them in parallel. Read a file before you edit it; edits to a file you have not read fail. Use edit_file for targeted changes and write_file only for new files or complete rewrites. Use grep and glob rather than shell commands such as find, grep, cat, head or tail. Keep shell commands non-interactive, quote paths that contain spaces, and avoid cd: use absolute paths.

# Git

When the user asks you to create a commit, first run git status, git diff and git log in parallel to see the state of the repository, the changes and the commit message style. Draft a concise message that focuses on why, not what. Never update the git config, never run destructive commands such as push --force or reset --hard unless the user explicitly asks, and never skip hooks.
`

// tools are the agent's functions, shaped as agents send them.
var tools = []any{
	fn("read_file", "Reads a file from the local filesystem. Lines are numbered from 1; long files can be read in parts with offset and limit.", props{"path": str("Absolute path of the file"), "offset": num("Line to start at"), "limit": num("Number of lines to read")}, "path"),
	fn("write_file", "Writes a file to the local filesystem, replacing it if it exists. Read an existing file first.", props{"path": str("Absolute path of the file"), "content": str("The content to write")}, "path", "content"),
	fn("edit_file", "Performs an exact string replacement in a file. old_string must be unique in the file unless replace_all is set.", props{"path": str("Absolute path of the file"), "old_string": str("The text to replace"), "new_string": str("The text to replace it with"), "replace_all": boolean("Replace every occurrence")}, "path", "old_string", "new_string"),
	fn("list_directory", "Lists files and directories in a given path.", props{"path": str("Absolute path of the directory"), "ignore": arr("Glob patterns to ignore")}, "path"),
	fn("grep", "Searches file contents with a regular expression (ripgrep syntax) and returns matching lines with file names and line numbers.", props{"pattern": str("The regular expression"), "path": str("Directory to search in"), "glob": str("Only files matching this glob"), "case_insensitive": boolean("Ignore case")}, "pattern"),
	fn("glob", "Finds files by name pattern, such as **/*.go, sorted by modification time.", props{"pattern": str("The glob pattern"), "path": str("Directory to search in")}, "pattern"),
	fn("run_shell", "Runs a shell command in a persistent shell session with an optional timeout, capturing its output.", props{"command": str("The command to run"), "timeout_ms": num("Timeout in milliseconds (at most 600000)"), "description": str("What the command does, in five to ten words")}, "command"),
	fn("web_fetch", "Fetches a URL and answers a prompt about its content.", props{"url": str("The URL to fetch"), "prompt": str("What to extract from the page")}, "url", "prompt"),
	fn("todo_write", "Creates and updates the structured task list of the current session.", props{"todos": map[string]any{"type": "array", "description": "The updated list", "items": map[string]any{"type": "object", "properties": props{"content": str("The task"), "status": map[string]any{"type": "string", "enum": []string{"pending", "in_progress", "completed"}}}, "required": []string{"content", "status"}}}}, "todos"),
	fn("task", "Launches a sub-agent to handle a complex, multi-step search or research task autonomously and return a summary.", props{"description": str("A short description of the task"), "prompt": str("The task for the agent to perform")}, "description", "prompt"),
}

type props = map[string]any

func fn(name, desc string, p props, required ...string) any {
	return map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc,
		"parameters": map[string]any{"type": "object", "properties": p, "required": required}}}
}

func str(d string) any     { return map[string]any{"type": "string", "description": d} }
func num(d string) any     { return map[string]any{"type": "integer", "description": d} }
func boolean(d string) any { return map[string]any{"type": "boolean", "description": d} }
func arr(d string) any {
	return map[string]any{"type": "array", "description": d, "items": map[string]any{"type": "string"}}
}

// script is the conversation: a failing test fixed, then a test added.
var script = []step{
	{user: "The streaming test in server/ fails since yesterday's refactor: usage chunks are missing when stream_options.include_usage is set. Please find the cause and fix it.",
		reasoning: "I should find where usage chunks are written.", call: "grep", args: map[string]any{"pattern": "include_usage|IncludeUsage", "path": "/home/dev/app/server"}},
	{reasoning: "The stream handler is in server/stream.go; read it.", call: "read_file", args: map[string]any{"path": "/home/dev/app/server/stream.go"}},
	{reasoning: "The usage chunk is only sent on the error path. Check the caller too.", call: "read_file", args: map[string]any{"path": "/home/dev/app/server/chat.go"}},
	{reasoning: "The refactor dropped the usage write after the final chunk.", call: "edit_file", args: map[string]any{"path": "/home/dev/app/server/stream.go", "old_string": "\tw.close()\n", "new_string": "\tif includeUsage {\n\t\tw.data(usageChunk(outcome))\n\t}\n\tw.close()\n"}},
	{reasoning: "Run the server tests.", call: "run_shell", args: map[string]any{"command": "go test ./server/...", "description": "Run the server package tests"}, failing: true},
	{reasoning: "Still failing: the usage is computed before the last token. Look at the outcome.", call: "read_file", args: map[string]any{"path": "/home/dev/app/server/outcome.go"}},
	{reasoning: "Compute usage after the generation ends.", call: "edit_file", args: map[string]any{"path": "/home/dev/app/server/outcome.go", "old_string": "u := usageOf(partial)", "new_string": "u := usageOf(final)"}},
	{reasoning: "Run the tests again.", call: "run_shell", args: map[string]any{"command": "go test ./...", "description": "Run every package's tests"}},
	{reasoning: "All pass.", text: "Fixed: the refactor stopped sending the usage chunk after the final chunk, and usage was computed from a partial outcome. `go test ./...` passes."},
	{user: "Thanks. Add a regression test for the usage chunk.", reasoning: "A test that streams with include_usage and counts usage chunks.", call: "write_file",
		args: map[string]any{"path": "/home/dev/app/server/usage_test.go", "content": "package server\n\nimport \"testing\"\n\nfunc TestStreamSendsOneUsageChunk(t *testing.T) {\n\tchunks := streamChunks(t, `{\"stream\":true,\"stream_options\":{\"include_usage\":true}}`)\n\tif n := countUsage(chunks); n != 1 {\n\t\tt.Fatalf(\"%d usage chunks, want 1\", n)\n\t}\n}\n"}},
}

// rewriteScript is a small edit made by rewriting the whole file: the first error path of the
// file read at turn 1 gets wrapped, then the tests run.
var rewriteScript = []step{
	{user: "When a handler in server/stream.go fails, the log only shows the bare error. Wrap the first handler's error with the package name so we can tell where it came from.",
		reasoning: "Read the file first.", call: "read_file", args: map[string]any{"path": "/home/dev/app/server/stream.go"}},
	{reasoning: "Write the file back with the first error wrapped and fmt imported.", call: "write_file", args: map[string]any{"path": "/home/dev/app/server/stream.go"}, rewrite: true},
	{reasoning: "Run the server tests.", call: "run_shell", args: map[string]any{"command": "go test ./server/...", "description": "Run the server package tests"}},
	{reasoning: "They pass.", text: "Done: the first handler in server/stream.go now wraps its error as `server: ...`, and fmt is imported. `go test ./server/...` passes."},
}

// rewritten is file with the small edit rewriteScript makes: fmt imported and the first bare
// error return wrapped.
func rewritten(file string) string {
	file = strings.Replace(file, "\t\"errors\"\n", "\t\"errors\"\n\t\"fmt\"\n", 1)
	return strings.Replace(file, "\t\treturn err\n", "\t\treturn fmt.Errorf(\"server: %w\", err)\n", 1)
}
