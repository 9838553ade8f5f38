package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/parse"
)

// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens): what Claude Code
// and the Anthropic SDKs speak. Requests become a neutral turn; its output becomes content
// blocks (thinking, text, tool_use), streamed as Anthropic's named events.

// messagesRequest is the part of a Messages request Lily reads; unknown fields (metadata,
// context_management, cache_control on any block, …) are ignored, as are the
// anthropic-version and anthropic-beta headers, whatever their value.
type messagesRequest struct {
	Model        string          `json:"model"`
	MaxTokens    *int            `json:"max_tokens"`
	System       json.RawMessage `json:"system"`
	Messages     []anthMessage   `json:"messages"`
	Tools        []anthTool      `json:"tools"`
	ToolChoice   *anthToolChoice `json:"tool_choice"`
	Thinking     *anthThinking   `json:"thinking"`
	OutputConfig *struct {
		Effort *string `json:"effort"`
	} `json:"output_config"`
	StopSequences []string `json:"stop_sequences"`
	Temperature   *float32 `json:"temperature"`
	TopP          *float32 `json:"top_p"`
	TopK          *int     `json:"top_k"`
	Stream        bool     `json:"stream"`
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthBlock is any content block; Type says which fields mean something.
type anthBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Source    json.RawMessage `json:"source"` // an image's
}

type anthTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

type anthThinking struct {
	Type         string `json:"type"`          // enabled, adaptive or disabled
	Display      string `json:"display"`       // summarized (the default) or omitted
	BudgetTokens *int   `json:"budget_tokens"` // enabled: the reasoning budget
}

// billingHeader starts a system block Claude Code adds with a per-request stamp: dropped, as
// vLLM and oMLX do, since it would change the head of every prompt and defeat the prefix cache.
const billingHeader = "x-anthropic-billing-header:"

// turn translates a Messages request; sig recovers thinking text from a block's signature.
func (req *messagesRequest) turn(sig thinkingSigner) (*turn, error) {
	if req.MaxTokens == nil {
		return nil, badRequest("max_tokens: field required", "max_tokens")
	}
	msgs, err := req.openAIMessages(sig)
	if err != nil {
		return nil, err
	}
	tools, err := req.openAITools()
	if err != nil {
		return nil, err
	}
	t := &turn{messages: msgs, tools: tools, maxTokens: []*int{req.MaxTokens}, stops: req.StopSequences,
		callID: func() string { return newID("toolu_") }}
	t.sampling = samplingFields{Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK}
	on := false // no thinking field: off, as with Anthropic's own models
	if req.Thinking != nil {
		switch req.Thinking.Type {
		case "enabled":
			on, t.budget = true, req.Thinking.BudgetTokens
		case "adaptive":
			on = true
		case "disabled":
		default:
			return nil, badRequest(fmt.Sprintf("thinking.type %q: expected enabled, adaptive or disabled", req.Thinking.Type), "thinking.type")
		}
	}
	t.thinking = &on
	if req.OutputConfig != nil && req.OutputConfig.Effort != nil && on {
		t.effort = req.OutputConfig.Effort
		if !knownEffort(*t.effort) {
			return nil, badRequest(fmt.Sprintf("output_config.effort %q: expected minimal, low, medium, high, xhigh or max", *t.effort), "output_config.effort")
		}
	}
	if c := req.ToolChoice; c != nil {
		switch c.Type {
		case "auto", "none":
			t.choice.mode = c.Type
		case "any":
			t.choice.mode = "required"
		case "tool":
			t.choice = toolChoice{mode: "named", name: c.Name}
		default:
			return nil, badRequest(fmt.Sprintf("tool_choice.type %q: expected auto, any, tool or none", c.Type), "tool_choice.type")
		}
	}
	return t, nil
}

// openAITools are the client's own tools in OpenAI's shape. Tools the server would have to run
// itself (web search, code execution, Anthropic's computer-use and editor types: a type other
// than "custom") are left out of the prompt.
func (req *messagesRequest) openAITools() (json.RawMessage, error) {
	var fns []oaFunction
	for i, t := range req.Tools {
		if t.Type == "" || t.Type == "custom" {
			fns = append(fns, oaFunction{t.Name, t.Description, t.InputSchema, i})
		}
	}
	return openAITools(fns)
}

// oaFunction is a client's function tool in OpenAI's shape. Structs, not maps: the template
// prints the tools as JSON in their keys' order, and that order is OpenAI's (type, function:
// name, description, parameters).
type oaFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	at          int             // its index in the request's tools, for errors
}

// openAITools are functions as the template's tools (nil: none): a function without a name is a
// 400, one without parameters takes no arguments (an empty object schema).
func openAITools(fns []oaFunction) (json.RawMessage, error) {
	type tool struct {
		Type     string     `json:"type"`
		Function oaFunction `json:"function"`
	}
	var out []tool
	for _, f := range fns {
		if f.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name is missing", f.at), "tools")
		}
		if len(bytes.TrimSpace(f.Parameters)) == 0 || string(f.Parameters) == "null" {
			f.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, tool{"function", f})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return json.Marshal(out)
}

// oaMessage is an OpenAI chat message as the template reads it.
type oaMessage struct {
	Role             string       `json:"role"`
	Content          string       `json:"content"`
	ReasoningContent string       `json:"reasoning_content,omitempty"`
	ToolCalls        []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string       `json:"tool_call_id,omitempty"`
	// Parts, when set, is the content instead of Content: text and images in order (content).
	Parts []oaPart `json:"-"`
}

// MarshalJSON writes Parts as the content when the message has them.
func (m oaMessage) MarshalJSON() ([]byte, error) {
	type plain oaMessage
	if m.Parts == nil {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Content []oaPart `json:"content"`
	}{plain(m), m.Parts})
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// openAIMessages translates system and messages into OpenAI chat messages: text blocks join,
// tool_use blocks become tool_calls, tool_result blocks become tool messages (before the
// user's own text, as the results answer the previous turn), thinking blocks become the
// assistant's reasoning_content. A role "system" message inside messages (Claude Code sends
// one) stays a system message, for chat.Normalize to place.
func (req *messagesRequest) openAIMessages(sig thinkingSigner) (json.RawMessage, error) {
	var out []oaMessage
	if sys, err := req.systemText(); err != nil {
		return nil, err
	} else if sys != "" {
		out = append(out, oaMessage{Role: "system", Content: sys})
	}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages: at least one message is required", "messages")
	}
	for i, m := range req.Messages {
		blocks, err := anthBlocks(m.Content)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d].content: %v", i, err), "messages")
		}
		msgs, err := translateMessage(m.Role, blocks, sig)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d]: %v", i, err), "messages")
		}
		out = append(out, msgs...)
	}
	return json.Marshal(out)
}

// systemText is the system prompt: a string or text blocks, joined by newlines, without the
// billing header block.
func (req *messagesRequest) systemText() (string, error) {
	raw := bytes.TrimSpace(req.System)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	blocks, err := anthBlocks(raw)
	if err != nil {
		return "", badRequest("system: "+err.Error(), "system")
	}
	var texts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", badRequest(fmt.Sprintf("system: block type %q: only text blocks", b.Type), "system")
		}
		if !strings.HasPrefix(b.Text, billingHeader) {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// anthBlocks reads content: a string (one text block) or a list of blocks.
func anthBlocks(raw json.RawMessage) ([]anthBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("must be a string or a list of content blocks")
	}
	return blocks, nil
}

// translateMessage is one Anthropic message as OpenAI chat messages.
func translateMessage(role string, blocks []anthBlock, sig thinkingSigner) ([]oaMessage, error) {
	var out []oaMessage
	own := oaMessage{Role: role}
	var text content
	for _, b := range blocks {
		switch b.Type {
		case "text":
			text.addText(b.Text)
		case "tool_use":
			if role != "assistant" {
				return nil, fmt.Errorf("tool_use blocks belong to assistant messages")
			}
			args := bytes.TrimSpace(b.Input)
			if len(args) == 0 || string(args) == "null" {
				args = []byte("{}")
			}
			call := oaToolCall{ID: b.ID, Type: "function"}
			call.Function.Name, call.Function.Arguments = b.Name, string(args)
			own.ToolCalls = append(own.ToolCalls, call)
		case "tool_result":
			if role != "user" {
				return nil, fmt.Errorf("tool_result blocks belong to user messages")
			}
			result, err := toolResult(b)
			if err != nil {
				return nil, err
			}
			tool := oaMessage{Role: "tool", ToolCallID: b.ToolUseID}
			result.set(&tool)
			out = append(out, tool)
		case "thinking":
			if role == "assistant" {
				own.ReasoningContent += sig.text(b.Thinking, b.Signature)
			}
		case "redacted_thinking":
		case "image":
			addAnthImage(&text, b.Source)
		case "document", "audio":
			return nil, fmt.Errorf("%s blocks are not supported: Lily reads text and images", b.Type)
		default:
			return nil, fmt.Errorf("content block type %q is not supported", b.Type)
		}
	}
	hasOwn := !text.empty()
	text.set(&own)
	switch role {
	case "user", "system":
		if hasOwn || len(out) == 0 {
			out = append(out, own)
		}
	case "assistant":
		out = append(out, own)
	default:
		return nil, fmt.Errorf("role %q: expected user or assistant", role)
	}
	return out, nil
}

// toolResult is a tool_result's content: a string, or text blocks joined by newlines, with its
// images where they stand (a screenshot tool's, a Read of a PNG); a document in a result becomes
// a placeholder, so the agent's loop goes on.
func toolResult(b anthBlock) (*content, error) {
	var c content
	if b.IsError {
		c.addText("Error: ")
	}
	raw := bytes.TrimSpace(b.Content)
	if len(raw) == 0 || string(raw) == "null" {
		return &c, nil
	}
	blocks, err := anthBlocks(raw)
	if err != nil {
		return nil, fmt.Errorf("tool_result content %v", err)
	}
	for i, blk := range blocks {
		if i > 0 {
			c.addText("\n")
		}
		switch blk.Type {
		case "text":
			c.addText(blk.Text)
		case "image":
			addAnthImage(&c, blk.Source)
		case "document":
			c.addText("[a document was returned here; this model reads text and images only]")
		default:
			return nil, fmt.Errorf("tool_result content block type %q is not supported", blk.Type)
		}
	}
	return &c, nil
}

// addAnthImage adds an Anthropic image block's source: base64 bytes (as a data URL) or a URL;
// another source (a Files API id) becomes a placeholder saying so.
func addAnthImage(c *content, raw json.RawMessage) {
	var src struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	}
	json.Unmarshal(raw, &src)
	switch {
	case src.Type == "base64" && src.Data != "":
		c.addImage(dataURL(src.MediaType, src.Data))
	case src.Type == "url" && src.URL != "":
		c.addImage(src.URL)
	default:
		c.addText(imagePlaceholder(fmt.Sprintf("an image source of type %q is not supported", src.Type)))
	}
}

// thinkingSigner makes and reads the signature of a thinking block: the text itself with an
// HMAC under a key this server process holds, so a client that does not display thinking
// (display "omitted": empty text, signature kept) still sends it back, and the conversation
// renders byte for byte as before, which keeps the prefix cache's entry usable.
type thinkingSigner struct{ key []byte }

func (s thinkingSigner) sign(text string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(text))
	return base64.RawURLEncoding.EncodeToString(append(mac.Sum(nil)[:16], text...))
}

// text is a returned block's thinking: the visible text, else what a valid signature holds.
func (s thinkingSigner) text(visible, signature string) string {
	if visible != "" || signature == "" {
		return visible
	}
	raw, err := base64.RawURLEncoding.DecodeString(signature)
	if err != nil || len(raw) < 16 {
		return ""
	}
	text := string(raw[16:])
	if !hmac.Equal([]byte(s.sign(text)), []byte(signature)) {
		return "" // another server's, or this one's before a restart
	}
	return text
}

func (s *Server) messages(c *gin.Context) {
	var req messagesRequest
	s.serveTurn(c, func() (*turn, error) {
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		return req.turn(s.signer)
	}, func(ctx context.Context, m *Model, p *turnPlan) {
		mc := &messagesCall{s: s, m: m, id: newID("msg_"), omit: req.Thinking != nil && req.Thinking.Display == "omitted",
			parallel: req.ToolChoice == nil || !req.ToolChoice.DisableParallelToolUse}
		if req.Stream {
			mc.stream(c, ctx, p)
		} else {
			mc.once(c, ctx, p)
		}
	})
}

// countTokens answers POST /v1/messages/count_tokens: the prompt the request renders to, in
// tokens, without generating (and without a place in the queue).
func (s *Server) countTokens(c *gin.Context) {
	m, a, p := s.planned(c, func() (*turn, error) {
		var req messagesRequest
		if err := decodeBody(c, &req); err != nil {
			return nil, err
		}
		one := 1
		req.MaxTokens = &one // count_tokens has none
		return req.turn(s.signer)
	})
	if p == nil {
		return
	}
	defer a.end()
	msgs, extra, err := countImages(m.Images, m.VisionWhy, p.t.messages)
	if err != nil {
		abortWith(c, err)
		return
	}
	if !bytes.Equal(msgs, p.t.messages) { // images there: their markers in text stay text, as when served
		msgs = escapeVisionText(msgs)
	}
	p.t.messages = msgs
	text, err := renderTurn(m, p)
	if err != nil {
		abortWith(c, err)
		return
	}
	reply(c, http.StatusOK, gin.H{"input_tokens": len(m.Tokenizer.Encode(text)) + extra})
}

// messagesCall carries one Messages answer's state.
type messagesCall struct {
	s        *Server
	m        *Model
	id       string
	omit     bool // thinking display "omitted": blocks carry the signature, not the text
	parallel bool // false: only the first tool call is kept (disable_parallel_tool_use)
	sawCall  bool
}

// anthUsage partitions the prompt as Anthropic does: input_tokens are the ones prefilled,
// cache_read_input_tokens the ones the prefix cache held.
func anthUsage(o genOutcome) gin.H {
	return gin.H{"input_tokens": o.res.PromptTokens - o.res.CachedTokens, "cache_creation_input_tokens": 0,
		"cache_read_input_tokens": o.res.CachedTokens, "output_tokens": len(o.res.Tokens)}
}

// stopReason is Anthropic's name for how generation ended, and the stop sequence if one did.
func (mc *messagesCall) stopReason(o genOutcome) (string, any) {
	switch {
	case o.stopSeq != "":
		return "stop_sequence", o.stopSeq
	case o.finish == "length":
		return "max_tokens", nil
	case mc.sawCall:
		return "tool_use", nil
	}
	return "end_turn", nil
}

// input is a call's arguments as the tool_use block's input object.
func input(args string) json.RawMessage {
	if json.Valid([]byte(args)) && strings.HasPrefix(strings.TrimSpace(args), "{") {
		return json.RawMessage(args)
	}
	return json.RawMessage("{}")
}

func (mc *messagesCall) once(c *gin.Context, ctx context.Context, p *turnPlan) {
	o, r, err := mc.s.runTurn(ctx, mc.m, p, nil)
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	content := []any{}
	if r.Reasoning != "" {
		shown := r.Reasoning
		if mc.omit {
			shown = ""
		}
		content = append(content, gin.H{"type": "thinking", "thinking": shown, "signature": mc.s.signer.sign(r.Reasoning)})
	}
	if r.Content != "" {
		content = append(content, gin.H{"type": "text", "text": r.Content})
	}
	for _, tc := range r.ToolCalls {
		if !mc.parallel && tc.Index > 0 {
			continue
		}
		mc.sawCall = true
		content = append(content, gin.H{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": input(tc.Arguments)})
	}
	reason, seq := mc.stopReason(o)
	reply(c, http.StatusOK, gin.H{"id": mc.id, "type": "message", "role": "assistant", "model": mc.m.ID, "content": content,
		"stop_reason": reason, "stop_sequence": seq, "usage": anthUsage(o)})
}

// anthPing is the keep-alive of a Messages stream (during the queue and the prefill).
func anthPing(*sseWriter) []byte { return []byte("event: ping\ndata: {\"type\":\"ping\"}\n\n") }

// blockStream turns parser deltas into content blocks: a block opens when the kind of output
// changes (thinking, text, each tool call) and closes before the next opens.
type blockStream struct {
	w        *sseWriter
	mc       *messagesCall
	index    int    // the open block's index
	open     string // its type ("": none open yet)
	thinking strings.Builder
}

func (b *blockStream) event(v gin.H) error { return b.w.event(v["type"].(string), v) }

// start closes the open block and opens one of type kind.
func (b *blockStream) start(kind string, block gin.H) error {
	if err := b.stop(); err != nil {
		return err
	}
	if b.open != "" {
		b.index++
	}
	b.open = kind
	block["type"] = kind
	return b.event(gin.H{"type": "content_block_start", "index": b.index, "content_block": block})
}

// stop closes the open block; a thinking block gets its signature first (Claude Code shows a
// thinking block only once its signature came).
func (b *blockStream) stop() error {
	switch {
	case b.open == "" || strings.HasPrefix(b.open, "closed:"):
		return nil
	case b.open == "thinking":
		if err := b.delta(gin.H{"type": "signature_delta", "signature": b.mc.s.signer.sign(b.thinking.String())}); err != nil {
			return err
		}
	}
	b.open = "closed:" + b.open
	return b.event(gin.H{"type": "content_block_stop", "index": b.index})
}

func (b *blockStream) delta(d gin.H) error {
	return b.event(gin.H{"type": "content_block_delta", "index": b.index, "delta": d})
}

// send streams one parser delta.
func (b *blockStream) send(d parse.Delta) error {
	switch {
	case d.ToolCall != nil:
		tc := d.ToolCall
		if !b.mc.parallel && tc.Index > 0 {
			return nil
		}
		if tc.ID != "" {
			b.mc.sawCall = true
			if err := b.start("tool_use", gin.H{"id": tc.ID, "name": tc.Name, "input": gin.H{}}); err != nil {
				return err
			}
		}
		if tc.Arguments == "" {
			return nil
		}
		return b.delta(gin.H{"type": "input_json_delta", "partial_json": tc.Arguments})
	case d.Reasoning != "":
		if b.open != "thinking" {
			b.thinking.Reset()
			if err := b.start("thinking", gin.H{"thinking": "", "signature": ""}); err != nil {
				return err
			}
		}
		b.thinking.WriteString(d.Reasoning)
		if b.mc.omit {
			return nil
		}
		return b.delta(gin.H{"type": "thinking_delta", "thinking": d.Reasoning})
	case d.Content != "":
		if b.open != "text" {
			if err := b.start("text", gin.H{"text": ""}); err != nil {
				return err
			}
		}
		return b.delta(gin.H{"type": "text_delta", "text": d.Content})
	}
	return nil
}

func (mc *messagesCall) stream(c *gin.Context, ctx context.Context, p *turnPlan) {
	w := startSSEPing(c, mc.s.cfg.KeepAlive, anthPing)
	defer w.end()
	start := gin.H{"id": mc.id, "type": "message", "role": "assistant", "model": mc.m.ID, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": gin.H{"input_tokens": len(p.g.prompt), "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}}
	if w.event("message_start", gin.H{"type": "message_start", "message": start}) != nil {
		return
	}
	b := &blockStream{w: w, mc: mc}
	o, _, err := mc.s.runTurn(ctx, mc.m, p, eachDelta(b.send))
	if err != nil {
		w.event("error", anthError(generationError(ctx, err)))
		return
	}
	if b.stop() != nil {
		return
	}
	reason, seq := mc.stopReason(o)
	w.event("message_delta", gin.H{"type": "message_delta", "delta": gin.H{"stop_reason": reason, "stop_sequence": seq}, "usage": anthUsage(o)})
	w.event("message_stop", gin.H{"type": "message_stop"})
}
