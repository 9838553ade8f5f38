package parse

import "strings"

// Qwen's markup, in one place for every package that writes or expects it: the server (a forced
// call's opening, the reasoning budget's close, whether a prompt opens the reasoning) and the
// grammar of tool calls. <think>, </think>, <tool_call> and </tool_call> are single added tokens;
// the function and parameter tags are plain text to the tokenizer.
const (
	ThinkOpen  = "<think>"
	ThinkEnd   = "</think>"
	CallOpen   = "<tool_call>"
	CallEnd    = "</tool_call>"
	FuncOpen   = "<function="
	FuncEnd    = "</function>"
	ParamOpen  = "<parameter="
	ParamEnd   = "</parameter>"
	ThinkClose = "\n</think>\n\n" // how Qwen ends its reasoning (and a thinking budget forces it to)
)

// CallOpening is a call of name up to its first parameter, as Qwen writes it.
func CallOpening(name string) string { return CallOpen + "\n" + FuncOpen + name + ">\n" }

// OpensReasoning reports whether a rendered prompt ends inside a reasoning block, so the output
// starts as reasoning (Options.PromptEndsInThink): Qwen's template ends such a prompt "<think>\n".
func OpensReasoning(prompt string) bool { return strings.HasSuffix(prompt, ThinkOpen+"\n") }
