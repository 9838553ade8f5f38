package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// The OpenAI Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}): what Codex
// speaks. Input items become a neutral turn; its output becomes reasoning, function_call and
// message items, streamed as Responses events with sequence numbers.

// responsesRequest is the part of a Responses request Lily reads; unknown fields (include,
// prompt_cache_key, client_metadata, truncation, …) are ignored.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              json.RawMessage `json:"tools"` // echoed as sent; respTools reads it
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Reasoning          *respReasoning  `json:"reasoning"`
	Text               *respText       `json:"text"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float32        `json:"temperature"`
	TopP               *float32        `json:"top_p"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Metadata           json.RawMessage `json:"metadata"`
	Stream             bool            `json:"stream"`
}

type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type respReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type respText struct {
	Format *struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"format"`
}

// respItem is any input item; Type (or, for a bare {role, content}, Role) says which fields
// mean something.
type respItem struct {
	Type             string          `json:"type"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        string          `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	Summary          []respPart      `json:"summary"`
	EncryptedContent string          `json:"encrypted_content"`
}

type respPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url,omitempty"` // input_image: a URL string ({url} tolerated)
}

// skippedItems are input items of tools the server does not run: they are left out.
var skippedItems = map[string]bool{"web_search_call": true, "file_search_call": true, "image_generation_call": true,
	"code_interpreter_call": true, "computer_call": true, "computer_call_output": true, "mcp_call": true,
	"mcp_list_tools": true, "mcp_approval_request": true, "mcp_approval_response": true, "item_reference": true}

// turn translates a Responses request, after the stored conversation prev (previous_response_id),
// and returns the conversation to store with its answer: the messages without the instructions
// (which, as OpenAI has it, a later request does not inherit).
func (req *responsesRequest) turn(sig thinkingSigner, prev json.RawMessage) (*turn, []oaMessage, error) {
	conv, err := req.openAIMessages(sig, prev)
	if err != nil {
		return nil, nil, err
	}
	all := conv
	if req.Instructions != nil && *req.Instructions != "" {
		all = append([]oaMessage{{Role: "system", Content: *req.Instructions}}, conv...)
	}
	msgs, err := json.Marshal(all)
	if err != nil {
		return nil, nil, err
	}
	tools, err := req.openAITools()
	if err != nil {
		return nil, nil, err
	}
	choice, err := openAIToolChoice(respToolChoice(req.ToolChoice))
	if err != nil {
		return nil, nil, err
	}
	t := &turn{messages: msgs, tools: tools, choice: choice, maxTokens: []*int{req.MaxOutputTokens},
		sampling: samplingFields{Temperature: req.Temperature, TopP: req.TopP}, callID: func() string { return newID("call_") }}
	if req.Reasoning != nil {
		t.effort = req.Reasoning.Effort
	}
	if f := req.Text; f != nil && f.Format != nil {
		switch f.Format.Type {
		case "text":
		case "json_object":
			t.format = outputFormat{kind: "json_object"}
		case "json_schema":
			t.format = outputFormat{kind: "json_schema", schema: f.Format.Schema}
		default:
			return nil, nil, badRequest(fmt.Sprintf("text.format.type %q: expected text, json_object or json_schema", f.Format.Type), "text.format.type")
		}
	}
	return t, conv, nil
}

// respToolChoice rewrites Responses' flat {"type":"function","name":…} as chat's nested form.
func respToolChoice(raw json.RawMessage) json.RawMessage {
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) == nil && named.Type == "function" && named.Name != "" {
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
		return b
	}
	return raw
}

// openAITools keeps the flat function tools; the ones the server would have to run (web_search,
// file_search, mcp, …) and namespaces and custom tools are left out of the prompt, not refused:
// Codex sends some by default.
func (req *responsesRequest) openAITools() (json.RawMessage, error) {
	var list []respTool
	if raw := bytes.TrimSpace(req.Tools); len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("tools must be a list of tool objects", "tools")
		}
	}
	var fns []oaFunction
	for i, t := range list {
		if t.Type == "function" {
			fns = append(fns, oaFunction{t.Name, t.Description, t.Parameters, i})
		}
	}
	return openAITools(fns)
}

// openAIMessages is the conversation as OpenAI chat messages: the stored one first, then the
// input items. A reasoning item, an assistant message and the function_call items after it join
// one assistant message; function_call_output items become tool messages.
func (req *responsesRequest) openAIMessages(sig thinkingSigner, prev json.RawMessage) ([]oaMessage, error) {
	var out []oaMessage
	if len(prev) > 0 {
		if err := json.Unmarshal(prev, &out); err != nil {
			return nil, fmt.Errorf("stored conversation: %w", err)
		}
	}
	items, err := inputItems(req.Input)
	if err != nil {
		return nil, err
	}
	reasoning := "" // a reasoning item's text, for the assistant message that follows
	for i, it := range items {
		msgs, next, err := translateItem(it, out, reasoning, sig)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("input[%d]: %v", i, err), "input")
		}
		out, reasoning = msgs, next
	}
	if len(out) == 0 {
		return nil, badRequest("input: no messages", "input")
	}
	return out, nil
}

// inputItems reads input: a string (one user message) or a list of items.
func inputItems(raw json.RawMessage) ([]respItem, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		c, _ := json.Marshal(s)
		return []respItem{{Type: "message", Role: "user", Content: c}}, nil
	}
	var items []respItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input must be a string or a list of items", "input")
	}
	return items, nil
}

// translateItem appends one input item to the conversation so far; reasoning is the text of
// a reasoning item not yet attached to an assistant message, and the one to carry on.
func translateItem(it respItem, out []oaMessage, reasoning string, sig thinkingSigner) ([]oaMessage, string, error) {
	kind := it.Type
	if kind == "" && it.Role != "" {
		kind = "message"
	}
	switch kind {
	case "message":
		text, err := respContent(it.Content)
		if err != nil {
			return nil, "", err
		}
		m := oaMessage{Role: it.Role}
		text.set(&m)
		if it.Role == "assistant" {
			m.ReasoningContent, reasoning = reasoning, ""
		}
		return append(out, m), reasoning, nil
	case "reasoning":
		return out, reasoning + reasoningText(it, sig), nil
	case "function_call":
		call := oaToolCall{ID: it.CallID, Type: "function"}
		call.Function.Name, call.Function.Arguments = it.Name, it.Arguments
		// A call joins the assistant message just before it (its text, or the calls before it):
		// Qwen writes text and calls in one turn, and the history must render as it was written.
		if n := len(out); n > 0 && out[n-1].Role == "assistant" && reasoning == "" {
			out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
			return out, "", nil
		}
		return append(out, oaMessage{Role: "assistant", ReasoningContent: reasoning, ToolCalls: []oaToolCall{call}}), "", nil
	case "function_call_output":
		text, err := respContent(it.Output)
		if err != nil {
			return nil, "", err
		}
		tool := oaMessage{Role: "tool", ToolCallID: it.CallID}
		text.set(&tool)
		return append(out, tool), reasoning, nil
	}
	if skippedItems[kind] || strings.HasPrefix(kind, "custom_tool_call") || strings.HasPrefix(kind, "local_shell_call") {
		return out, reasoning, nil
	}
	return nil, "", fmt.Errorf("item type %q is not supported", kind)
}

// reasoningText is a returned reasoning item's text: what its encrypted_content (this server's
// signed thinking) holds, else its reasoning_text content or summary.
func reasoningText(it respItem, sig thinkingSigner) string {
	if t := sig.text("", it.EncryptedContent); t != "" {
		return t
	}
	var parts []respPart
	json.Unmarshal(it.Content, &parts)
	var b strings.Builder
	for _, p := range append(parts, it.Summary...) {
		b.WriteString(p.Text)
	}
	return b.String()
}

// respContent is a content or output: a string, or text parts (input_text, output_text) and
// images (input_image, by URL or data URL; one by file id becomes a placeholder); files and
// audio get a 400 naming what Lily reads.
func respContent(raw json.RawMessage) (*content, error) {
	var c content
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return &c, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		c.addText(s)
		return &c, nil
	}
	var parts []respPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("content must be a string or a list of parts")
	}
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			c.addText(p.Text)
		case "refusal":
		case "input_image":
			if url, err := imageRef(map[string]json.RawMessage{"image_url": p.ImageURL}); err == nil {
				c.addImage(url)
			} else {
				c.addText(imagePlaceholder("an image by file id is not supported"))
			}
		case "input_file", "input_audio":
			return nil, fmt.Errorf("%s parts are not supported: Lily reads text and images", p.Type)
		default:
			return nil, fmt.Errorf("content part type %q is not supported", p.Type)
		}
	}
	return &c, nil
}

func (s *Server) responses(c *gin.Context) {
	var req responsesRequest
	var conversation []oaMessage // the turn's messages, kept for a stored response
	s.serveTurn(c, func() (*turn, error) {
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		var prev json.RawMessage
		if id := req.PreviousResponseID; id != nil && *id != "" {
			st, ok := s.stored.get(*id)
			if !ok {
				return nil, &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("previous_response_id %q: no stored response has this id (responses are kept in memory: the latest %d, up to %d MiB)", *id, storedResponses, storedBytes>>20), Type: "invalid_request_error", Param: strp("previous_response_id")}
			}
			prev = st.conversation
		}
		t, conv, err := req.turn(s.signer, prev)
		conversation = conv
		return t, err
	}, func(ctx context.Context, m *Model, p *turnPlan) {
		rc := &responseCall{s: s, m: m, req: &req, id: newID("resp_"), created: time.Now().Unix(), conversation: conversation}
		rc.parallel = req.ParallelToolCalls == nil || *req.ParallelToolCalls
		rc.summary = req.Reasoning != nil && req.Reasoning.Summary != nil && *req.Reasoning.Summary != ""
		if req.Stream {
			rc.stream(c, ctx, p)
		} else {
			rc.once(c, ctx, p)
		}
	})
}

// getResponse answers GET /v1/responses/{id} for a stored response.
func (s *Server) getResponse(c *gin.Context) {
	st, ok := s.stored.get(c.Param("id"))
	if !ok {
		abortWith(c, &apiError{Status: http.StatusNotFound, Message: "no stored response has the id " + c.Param("id"), Type: "invalid_request_error"})
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", st.response)
}

// deleteResponse answers DELETE /v1/responses/{id}.
func (s *Server) deleteResponse(c *gin.Context) {
	if !s.stored.delete(c.Param("id")) {
		abortWith(c, &apiError{Status: http.StatusNotFound, Message: "no stored response has the id " + c.Param("id"), Type: "invalid_request_error"})
		return
	}
	reply(c, http.StatusOK, gin.H{"id": c.Param("id"), "object": "response", "deleted": true})
}
