package agenttrace

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/tokenizer"
)

// Forced is a turn made ready for a teacher-forced replay: its prompt as lily serve renders the
// request, and its recorded reply as the model would have generated it, in token ids.
type Forced struct {
	Turn          int // from 1
	Prompt, Reply []int
}

// Force renders every turn of t that has a reply with tmpl and tok as lily serve does a request
// without chat_template_kwargs (the conversation normalised, thinking on, the generation prompt
// added). The reply is what the same template appends for the assistant message — the
// reasoning, the text and the tool calls in the template's own format, then the end of the
// message — less the newline the template puts after <|im_end|>, which the model never generates
// (it stops at that token).
func Force(t *Trace, tmpl *chat.Template, tok *tokenizer.Tokenizer) ([]Forced, error) {
	var out []Forced
	for i, turn := range t.Turns {
		if len(turn.Reply) == 0 || string(turn.Reply) == "null" {
			continue // the last turn may leave the answer to the model
		}
		msgs := t.Messages(i)
		prompt, err := render(tmpl, t.Tools, msgs, true)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", i+1, err)
		}
		full, err := render(tmpl, t.Tools, append(msgs, turn.Reply), false)
		if err != nil {
			return nil, fmt.Errorf("turn %d with its reply: %w", i+1, err)
		}
		reply, ok := strings.CutPrefix(full, prompt)
		if !ok {
			return nil, fmt.Errorf("turn %d: the template renders the reply's history unlike the prompt it answers", i+1)
		}
		if r, ok := strings.CutSuffix(reply, imEnd+"\n"); ok {
			reply = r + imEnd
		}
		out = append(out, Forced{Turn: i + 1, Prompt: tok.Encode(prompt), Reply: tok.Encode(reply)})
	}
	return out, nil
}

// imEnd ends a message in Qwen's template: the model's last token of a turn.
const imEnd = "<|im_end|>"

// render renders msgs as the server does (chat.Normalize, then enable_thinking on).
func render(tmpl *chat.Template, tools json.RawMessage, msgs []json.RawMessage, addGen bool) (string, error) {
	raw, err := json.Marshal(msgs)
	if err != nil {
		return "", err
	}
	norm, err := chat.Normalize(raw)
	if err != nil {
		return "", err
	}
	return tmpl.Render(chat.Request{Messages: norm, Tools: tools, AddGenerationPrompt: addGen,
		Kwargs: map[string]json.RawMessage{"enable_thinking": json.RawMessage("true")}})
}
