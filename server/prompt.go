package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/runner"
)

// The prompt side of every turn and text completion: checking the messages, encoding the
// rendered prompt within the context, sizing the completion, and where the prefix cache keeps
// state.

// checkMessages rejects what Lily cannot feed the model, with a clear 400.
func checkMessages(raw json.RawMessage) error {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		// text fields the template reads besides content: a string or null
		ReasoningContent json.RawMessage `json:"reasoning_content"`
		Reasoning        json.RawMessage `json:"reasoning"`
		Name             json.RawMessage `json:"name"`
		ToolCallID       json.RawMessage `json:"tool_call_id"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return badRequest("messages must be a non-empty array of {role, content} objects", "messages")
	}
	for i, m := range msgs {
		if m.Role == "" {
			return badRequest(fmt.Sprintf("messages[%d].role is missing", i), "messages")
		}
		for _, f := range []struct {
			name string
			raw  json.RawMessage
		}{{"reasoning_content", m.ReasoningContent}, {"reasoning", m.Reasoning}, {"name", m.Name}, {"tool_call_id", m.ToolCallID}} {
			if v := bytes.TrimSpace(f.raw); len(v) > 0 && v[0] != '"' && string(v) != "null" {
				field := fmt.Sprintf("messages[%d].%s", i, f.name)
				return badRequest(field+" must be a string", field)
			}
		}
		c := bytes.TrimSpace(m.Content)
		if len(c) == 0 || c[0] != '[' {
			continue
		}
		var parts []struct {
			Type string          `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return badRequest(fmt.Sprintf("messages[%d].content must be a string or an array of content parts", i), "messages")
		}
		for j, p := range parts {
			if imagePartTypes[p.Type] {
				continue // an image: used, or a placeholder saying why not (imagesInPrompt)
			}
			if p.Type != "text" {
				return badRequest(fmt.Sprintf("messages[%d]: content part type %q is not supported: Lily reads text and images", i, p.Type), "messages")
			}
			if t := bytes.TrimSpace(p.Text); len(t) == 0 || t[0] != '"' {
				return badRequest(fmt.Sprintf("messages[%d].content[%d].text must be a string", i, j), fmt.Sprintf("messages[%d].content[%d].text", i, j))
			}
		}
	}
	return nil
}

// turnCheckpoints are where a later request is likely to leave this prompt, so the prefix cache
// keeps the prefill's state there (the recurrent layers' state exists only where it was saved):
// the end of the first message (the system prompt and tools, shared by every conversation of a
// client) and the end of the last message, before the generation prompt (the next turn of this
// conversation appends the answer there, rendered as the template renders history). Messages
// start with chat.MessageStart in Qwen's template; a template without it gets none.
func turnCheckpoints(m *Model, ids []int) []int {
	start, ok := m.Tokenizer.TokenID(chat.MessageStart)
	if !ok {
		return nil
	}
	var at []int
	for i, id := range ids {
		if id == start && i > 0 {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return nil
	}
	return []int{at[0], at[len(at)-1]}
}

// encodePrompt tokenizes a prompt, giving up as soon as it cannot leave room for one token of
// output: an over-long prompt costs the tokenizer only the part that fits.
func encodePrompt(m *Model, text string) ([]int, error) {
	ids, ok := m.Tokenizer.EncodeLimit(text, m.Context-1)
	if !ok {
		// The whole count, for the error only (Claude Code reads it to decide how much to compact).
		n := len(m.Tokenizer.Encode(text))
		return nil, contextExceeded(fmt.Sprintf("the prompt is %d tokens, more than %d; this model's context is %d tokens", n, m.Context-1, m.Context), n, m.Context-1)
	}
	return ids, nil
}

// expandImages gives each image in the encoded prompt (one image-pad token each, as the template
// renders it) its H·W pad tokens, and the runner its rows; the prompt must still leave room for
// one token of output.
func expandImages(m *Model, ids []int, ims []*images.Encoded) ([]int, []runner.Image, error) {
	if len(ims) == 0 {
		return ids, nil, nil
	}
	pad, ok := m.Tokenizer.TokenID(imagePad)
	if !ok {
		return nil, nil, fmt.Errorf("the tokenizer has no %s token", imagePad)
	}
	out, placed, err := images.Expand(ids, pad, ims)
	if err != nil {
		return nil, nil, badRequest("the prompt's image tokens do not match its images: "+err.Error(), "messages")
	}
	if len(out) > m.Context-1 {
		return nil, nil, contextExceeded(fmt.Sprintf("the prompt is %d tokens with its images, more than %d; this model's context is %d tokens", len(out), m.Context-1, m.Context), len(out), m.Context-1)
	}
	return out, placed, nil
}

// imagePad is the token the chat template writes for an image, which Lily expands to the
// image's token count.
const imagePad = "<|image_pad|>"

// budget resolves the completion-token limit against the context window.
func (s *Server) budget(m *Model, promptLen int, limits ...*int) (int, error) {
	room := m.Context - promptLen
	if room < 1 {
		return 0, contextExceeded(fmt.Sprintf("the prompt is %d tokens; this model's context is %d tokens", promptLen, m.Context), promptLen, m.Context-1)
	}
	if s.cfg.MaxOutputTokens > 0 {
		room = min(room, s.cfg.MaxOutputTokens)
	}
	for _, l := range limits {
		if l != nil {
			if *l < 1 {
				return 0, badRequest("max_tokens must be at least 1", "max_tokens")
			}
			return min(*l, room), nil
		}
	}
	return room, nil
}

// newID is a response or call id: prefix and 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
