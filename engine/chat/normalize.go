package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Normalize rewrites a conversation that Qwen's template would reject, or that clients send in
// shapes it does not know, into one it renders (the same rules for every API dialect):
//
//   - role "developer" (OpenAI's newer name, what Codex sends) is "system";
//   - the leading system messages become one, their texts joined by a blank line (the template
//     takes one system message, first);
//   - a later system message (Claude Code sends one last) is folded into the last user message
//     before it, after a blank line, or, with none before, into the first one after it, before
//     a blank line. Folding it near where it was sent rather than hoisting it into the system
//     prompt keeps the long head of the prompt, and so the prefix cache, unchanged when the late
//     text changes.
//
// A message's content is a string or a list of text parts; merged texts are the parts' texts
// concatenated, as the template renders them. Everything else in a message is kept as it is.
func Normalize(messages json.RawMessage) (json.RawMessage, error) {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(messages, &msgs); err != nil {
		return nil, &InputError{errors.New("chat: messages must be a JSON array of objects")}
	}
	roles := make([]string, len(msgs))
	changed := false
	for i, m := range msgs {
		json.Unmarshal(m["role"], &roles[i])
		if roles[i] == "developer" {
			roles[i], changed = "system", true
			m["role"] = json.RawMessage(`"system"`)
		}
	}
	lead := 0
	for lead < len(msgs) && roles[lead] == "system" {
		lead++
	}
	changed = changed || lead > 1
	if lead > 1 {
		var texts []string
		for _, m := range msgs[:lead] {
			t, err := text(m["content"])
			if err != nil {
				return nil, err
			}
			texts = append(texts, t)
		}
		msgs[0]["content"] = jsonString(strings.Join(texts, "\n\n"))
		msgs, roles = append(msgs[:1], msgs[lead:]...), append(roles[:1], roles[lead:]...)
	}
	for i := 1; i < len(msgs); i++ {
		if roles[i] != "system" {
			continue
		}
		if !fold(msgs, roles, i) {
			continue // no user message at all: the template says what is wrong
		}
		msgs, roles = append(msgs[:i], msgs[i+1:]...), append(roles[:i], roles[i+1:]...)
		i--
		changed = true
	}
	if !changed {
		return messages, nil
	}
	return json.Marshal(msgs)
}

// fold merges the system message at i into the last user message before it (appended), else
// the first after it (prepended); false when there is no user message.
func fold(msgs []map[string]json.RawMessage, roles []string, i int) bool {
	late, err := text(msgs[i]["content"])
	if err != nil {
		return false
	}
	target, after := -1, false
	for j := i - 1; j >= 0 && target < 0; j-- {
		if roles[j] == "user" {
			target = j
		}
	}
	for j := i + 1; j < len(msgs) && target < 0; j++ {
		if roles[j] == "user" {
			target, after = j, true
		}
	}
	if target < 0 {
		return false
	}
	own, err := text(msgs[target]["content"])
	if err != nil {
		// A content with images: the late text joins it as a part of its own.
		c, ok := addTextPart(msgs[target]["content"], late, after)
		if ok {
			msgs[target]["content"] = c
		}
		return ok
	}
	switch {
	case own == "":
		own = late
	case after:
		own = late + "\n\n" + own
	default:
		own = own + "\n\n" + late
	}
	msgs[target]["content"] = jsonString(own)
	return true
}

// addTextPart adds s to a list of content parts as a text part, first (before: s and a blank
// line) or last (a blank line and s).
func addTextPart(raw json.RawMessage, s string, before bool) (json.RawMessage, bool) {
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return nil, false
	}
	if before {
		s += "\n\n"
	} else {
		s = "\n\n" + s
	}
	part, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	if before {
		parts = append([]json.RawMessage{part}, parts...)
	} else {
		parts = append(parts, part)
	}
	out, err := json.Marshal(parts)
	return out, err == nil
}

// text is a message content's text: a string, a list of text parts, or nothing.
func text(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", &InputError{errors.New("chat: a message's content must be a string or a list of text parts")}
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", &InputError{fmt.Errorf("chat: content part type %q cannot be merged: only text parts", p.Type)}
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// Ending is how a rendered prompt ends: with the generation prompt (a new assistant turn) or
// inside the final assistant message, continuing it (an assistant prefill).
type Ending struct {
	AddGenerationPrompt bool
	ContinueFinal       bool
}

// ResolveEnding applies a request's add_generation_prompt and continue_final_message (nil:
// not given; chat_template_kwargs' add_generation_prompt overrides the top-level one, as in
// vLLM) to a conversation that ends with an assistant message or not. A request that gives
// neither has a final assistant message continued (Anthropic's prefill; transformers'
// continue_final_message) and any other conversation gets the generation prompt; one that gives
// add_generation_prompt renders as transformers does with it (a final assistant message closed).
// Asking for both is an error, as is continuing a conversation that does not end with an
// assistant message.
func ResolveEnding(addGen, cont *bool, kwargs map[string]json.RawMessage, endsWithAssistant bool) (Ending, error) {
	if raw, ok := kwargs["add_generation_prompt"]; ok {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return Ending{}, &InputError{errors.New("chat_template_kwargs.add_generation_prompt must be a boolean")}
		}
		addGen = &v
	}
	var e Ending
	switch {
	case cont != nil:
		e.ContinueFinal = *cont
	default:
		e.ContinueFinal = endsWithAssistant && addGen == nil
	}
	e.AddGenerationPrompt = !e.ContinueFinal
	if addGen != nil {
		e.AddGenerationPrompt = *addGen
	}
	if e.ContinueFinal && e.AddGenerationPrompt {
		return Ending{}, &InputError{errors.New("continue_final_message and add_generation_prompt cannot both be true")}
	}
	if e.ContinueFinal && !endsWithAssistant {
		return Ending{}, &InputError{errors.New("continue_final_message needs a conversation that ends with an assistant message")}
	}
	return e, nil
}

// EndsWithAssistant reports whether the last message's role is "assistant".
func EndsWithAssistant(messages json.RawMessage) bool {
	var msgs []struct {
		Role string `json:"role"`
	}
	return json.Unmarshal(messages, &msgs) == nil && len(msgs) > 0 && msgs[len(msgs)-1].Role == "assistant"
}

// MessageStart opens every message in Qwen's template (the server keeps prefix-cache
// checkpoints where messages start); imEnd closes each.
const (
	MessageStart = "<|im_start|>"
	imEnd        = "<|im_end|>\n"
)

// continueFinal cuts a prompt rendered without the generation prompt right after the final
// assistant message's content: the template closed it (transformers' continue_final_message
// cuts at the content the same way).
func continueFinal(out string) (string, error) {
	if !strings.HasSuffix(out, imEnd) {
		return "", &InputError{errors.New("chat: this template does not close the final assistant message with <|im_end|>, so it cannot be continued")}
	}
	return strings.TrimSuffix(out, imEnd), nil
}
