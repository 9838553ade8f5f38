// Package agenttrace is a coding agent's conversation kept for replay — a long system prompt,
// tools, then turns of user messages, tool calls and tool results — and the replay of it against
// Lily's chat endpoint, turn by turn, measuring what an agent gets: tokens prefilled and served
// from the prefix cache, time to first token and decode speed. It also replays a conversation
// teacher-forced, the recorded replies as the output, through speculative decoding's drafter
// and cost gate, to model what drafting would save (Force, Drafts).
package agenttrace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Trace is a conversation to replay. Turn i's request is every earlier turn's messages and
// reply, then turn i's messages: the replies are the recorded assistant turns, sent back as an
// agent sends its history, whatever the model answered during the replay.
type Trace struct {
	Description string          `json:"description"`
	Tools       json.RawMessage `json:"tools"` // OpenAI function tools
	Turns       []Turn          `json:"turns"`
}

// Turn is one request of the conversation.
type Turn struct {
	Messages []json.RawMessage `json:"messages"` // appended before this turn's request
	Reply    json.RawMessage   `json:"reply"`    // the assistant message appended after it
}

// Load reads and checks a trace file.
func Load(path string) (*Trace, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Trace
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("agent trace %s: %w", path, err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("agent trace %s: %w", path, err)
	}
	return &t, nil
}

func (t *Trace) check() error {
	if len(t.Turns) == 0 {
		return errors.New("no turns")
	}
	for i, turn := range t.Turns {
		if len(turn.Messages) == 0 {
			return fmt.Errorf("turn %d: no messages", i+1)
		}
		var reply struct {
			Role string `json:"role"`
		}
		if i < len(t.Turns)-1 && (json.Unmarshal(turn.Reply, &reply) != nil || reply.Role != "assistant") {
			return fmt.Errorf("turn %d: reply must be an assistant message", i+1)
		}
	}
	return nil
}

// Messages is the conversation sent at turn i (from 0).
func (t *Trace) Messages(i int) []json.RawMessage {
	var out []json.RawMessage
	for k, turn := range t.Turns[:i+1] {
		out = append(out, turn.Messages...)
		if k < i {
			out = append(out, turn.Reply)
		}
	}
	return out
}
