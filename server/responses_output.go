package server

import (
	"container/list"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/lilyformac/lily/engine/parse"
)

// responseCall carries one Responses answer's state.
type responseCall struct {
	s            *Server
	m            *Model
	req          *responsesRequest
	id           string
	created      int64
	conversation []oaMessage // the request's messages (without instructions), for storing
	parallel     bool        // false: only the first function call is kept
	summary      bool        // reasoning.summary asked: reasoning streams as its summary
	sawCall      bool
}

// items builds the output items of a whole result: reasoning, then the message (text before
// the calls, as Qwen writes it), then the function calls.
func (rc *responseCall) items(r parse.Result) []gin.H {
	var out []gin.H
	if r.Reasoning != "" {
		out = append(out, rc.reasoningItem(newID("rs_"), r.Reasoning))
	}
	if r.Content != "" {
		out = append(out, messageItem(newID("msg_"), r.Content, "completed"))
	}
	for _, tc := range r.ToolCalls {
		if !rc.parallel && tc.Index > 0 {
			continue
		}
		rc.sawCall = true
		out = append(out, callItem(newID("fc_"), tc.ID, tc.Name, tc.Arguments, "completed"))
	}
	return out
}

// reasoningItem holds the thinking text as its summary (when asked) or its reasoning_text
// content, and, signed, as encrypted_content, which Codex sends back so the next turn renders
// the same prompt.
func (rc *responseCall) reasoningItem(id, text string) gin.H {
	item := gin.H{"id": id, "type": "reasoning", "summary": []any{}, "encrypted_content": rc.s.signer.sign(text)}
	part := gin.H{"type": "reasoning_text", "text": text}
	if rc.summary {
		item["summary"] = []any{gin.H{"type": "summary_text", "text": text}}
	} else {
		item["content"] = []any{part}
	}
	return item
}

func messageItem(id, text, status string) gin.H {
	content := []any{}
	if status == "completed" {
		content = append(content, gin.H{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}})
	}
	return gin.H{"id": id, "type": "message", "role": "assistant", "status": status, "content": content}
}

func callItem(id, callID, name, args, status string) gin.H {
	return gin.H{"id": id, "type": "function_call", "call_id": callID, "name": name, "arguments": args, "status": status}
}

// object is the response object with status and output, usage when o is given.
func (rc *responseCall) object(status string, output []gin.H, o *genOutcome) gin.H {
	req := rc.req
	reasoning := gin.H{"effort": nil, "summary": nil}
	if req.Reasoning != nil {
		reasoning = gin.H{"effort": req.Reasoning.Effort, "summary": req.Reasoning.Summary}
	}
	format := gin.H{"type": "text"}
	if req.Text != nil && req.Text.Format != nil {
		format = gin.H{"type": req.Text.Format.Type, "name": req.Text.Format.Name, "schema": req.Text.Format.Schema, "strict": req.Text.Format.Strict}
	}
	var choice any = "auto"
	if len(req.ToolChoice) > 0 {
		choice = req.ToolChoice
	}
	metadata := any(gin.H{})
	if len(req.Metadata) > 0 && string(req.Metadata) != "null" {
		metadata = req.Metadata
	}
	if output == nil {
		output = []gin.H{}
	}
	obj := gin.H{"id": rc.id, "object": "response", "created_at": rc.created, "status": status, "model": rc.m.ID,
		"output": output, "error": nil, "incomplete_details": nil, "instructions": req.Instructions,
		"max_output_tokens": req.MaxOutputTokens, "parallel_tool_calls": rc.parallel, "previous_response_id": req.PreviousResponseID,
		"reasoning": reasoning, "store": req.Store == nil || *req.Store, "temperature": req.Temperature, "top_p": req.TopP,
		"text": gin.H{"format": format}, "tool_choice": choice, "tools": orEmpty(req.Tools), "truncation": "disabled",
		"metadata": metadata, "usage": nil}
	if o != nil {
		obj["usage"] = gin.H{"input_tokens": o.res.PromptTokens, "input_tokens_details": gin.H{"cached_tokens": o.res.CachedTokens},
			"output_tokens": len(o.res.Tokens), "output_tokens_details": gin.H{"reasoning_tokens": o.reasoningTokens},
			"total_tokens": o.res.PromptTokens + len(o.res.Tokens)}
		if o.finish == "length" {
			obj["status"], obj["incomplete_details"] = "incomplete", gin.H{"reason": "max_output_tokens"}
		}
	}
	return obj
}

func orEmpty(raw json.RawMessage) any {
	if len(raw) == 0 || string(raw) == "null" {
		return []any{}
	}
	return raw
}

func (rc *responseCall) once(c *gin.Context, ctx context.Context, p *turnPlan) {
	o, r, err := rc.s.runTurn(ctx, rc.m, p, nil)
	if err != nil {
		failPlain(c, ctx, err)
		return
	}
	obj := rc.object("completed", rc.items(r), &o)
	body, err := json.Marshal(obj)
	if err != nil {
		abortWith(c, err)
		return
	}
	rc.store(body, r)
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

// store keeps the response (unless store is false) with the conversation it ends, for GET and
// for a later previous_response_id.
func (rc *responseCall) store(body []byte, r parse.Result) {
	if rc.req.Store != nil && !*rc.req.Store {
		return
	}
	answer := oaMessage{Role: "assistant", Content: r.Content, ReasoningContent: r.Reasoning}
	for _, tc := range r.ToolCalls {
		if !rc.parallel && tc.Index > 0 {
			continue
		}
		call := oaToolCall{ID: tc.ID, Type: "function"}
		call.Function.Name, call.Function.Arguments = tc.Name, tc.Arguments
		answer.ToolCalls = append(answer.ToolCalls, call)
	}
	conv, err := json.Marshal(append(rc.conversation, answer))
	if err == nil {
		rc.s.stored.put(rc.id, storedResponse{response: body, conversation: conv})
	}
}

// itemStream turns parser deltas into output items as they stream: an item opens when the kind
// of output changes (reasoning, message, each function call) and is done before the next opens.
type itemStream struct {
	w      *sseWriter
	rc     *responseCall
	output []gin.H // items done
	open   string  // the open item's type ("": none)
	id     string  // its id
	callID string  // a function call's call_id
	name   string  // a function call's name
	text   strings.Builder
}

func (is *itemStream) emit(name string, fields gin.H) error {
	return is.w.seqEvent("response."+name, fields)
}

// start ends the open item and opens one of type kind with the added event's item.
func (is *itemStream) start(kind string, item gin.H) error {
	if err := is.done(); err != nil {
		return err
	}
	is.open, is.id = kind, item["id"].(string)
	is.text.Reset()
	if err := is.emit("output_item.added", gin.H{"output_index": len(is.output), "item": item}); err != nil {
		return err
	}
	at := gin.H{"item_id": is.id, "output_index": len(is.output)}
	switch {
	case kind == "message":
		return is.emit("content_part.added", with(at, gin.H{"content_index": 0, "part": gin.H{"type": "output_text", "text": "", "annotations": []any{}}}))
	case kind == "reasoning" && is.rc.summary:
		return is.emit("reasoning_summary_part.added", with(at, gin.H{"summary_index": 0, "part": gin.H{"type": "summary_text", "text": ""}}))
	}
	return nil
}

// done ends the open item: its closing events, then output_item.done with the whole item.
func (is *itemStream) done() error {
	if is.open == "" {
		return nil
	}
	at := gin.H{"item_id": is.id, "output_index": len(is.output)}
	text := is.text.String()
	var events []struct {
		name   string
		fields gin.H
	}
	add := func(name string, fields gin.H) {
		events = append(events, struct {
			name   string
			fields gin.H
		}{name, with(at, fields)})
	}
	var item gin.H
	switch is.open {
	case "message":
		part := gin.H{"type": "output_text", "text": text, "annotations": []any{}}
		add("output_text.done", gin.H{"content_index": 0, "text": text, "logprobs": []any{}})
		add("content_part.done", gin.H{"content_index": 0, "part": part})
		item = messageItem(is.id, text, "completed")
	case "reasoning":
		if is.rc.summary {
			add("reasoning_summary_text.done", gin.H{"summary_index": 0, "text": text})
			add("reasoning_summary_part.done", gin.H{"summary_index": 0, "part": gin.H{"type": "summary_text", "text": text}})
		} else {
			add("reasoning_text.done", gin.H{"content_index": 0, "text": text})
		}
		item = is.rc.reasoningItem(is.id, text)
	case "function_call":
		add("function_call_arguments.done", gin.H{"arguments": text})
		item = callItem(is.id, is.callID, is.name, text, "completed")
	}
	for _, e := range events {
		if err := is.emit(e.name, e.fields); err != nil {
			return err
		}
	}
	if err := is.emit("output_item.done", gin.H{"output_index": len(is.output), "item": item}); err != nil {
		return err
	}
	is.output, is.open = append(is.output, item), ""
	return nil
}

func with(a, b gin.H) gin.H {
	out := gin.H{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// send streams one parser delta.
func (is *itemStream) send(d parse.Delta) error {
	at := func() gin.H { return gin.H{"item_id": is.id, "output_index": len(is.output)} }
	switch {
	case d.ToolCall != nil:
		tc := d.ToolCall
		if !is.rc.parallel && tc.Index > 0 {
			return nil
		}
		if tc.ID != "" {
			is.rc.sawCall = true
			if err := is.start("function_call", callItem(newID("fc_"), tc.ID, tc.Name, "", "in_progress")); err != nil {
				return err
			}
			is.callID, is.name = tc.ID, tc.Name
		}
		if tc.Arguments == "" {
			return nil
		}
		is.text.WriteString(tc.Arguments)
		return is.emit("function_call_arguments.delta", with(at(), gin.H{"delta": tc.Arguments}))
	case d.Reasoning != "":
		if is.open != "reasoning" {
			if err := is.start("reasoning", gin.H{"id": newID("rs_"), "type": "reasoning", "summary": []any{}}); err != nil {
				return err
			}
		}
		is.text.WriteString(d.Reasoning)
		if is.rc.summary {
			return is.emit("reasoning_summary_text.delta", with(at(), gin.H{"summary_index": 0, "delta": d.Reasoning}))
		}
		return is.emit("reasoning_text.delta", with(at(), gin.H{"content_index": 0, "delta": d.Reasoning}))
	case d.Content != "":
		if is.open != "message" {
			if err := is.start("message", messageItem(newID("msg_"), "", "in_progress")); err != nil {
				return err
			}
		}
		is.text.WriteString(d.Content)
		return is.emit("output_text.delta", with(at(), gin.H{"content_index": 0, "delta": d.Content, "logprobs": []any{}}))
	}
	return nil
}

func (rc *responseCall) stream(c *gin.Context, ctx context.Context, p *turnPlan) {
	// The keep-alive is response.in_progress: Codex's idle timer waits for events, not comments.
	ping := func(w *sseWriter) []byte {
		return w.seqEventLocked("response.in_progress", gin.H{"response": rc.object("in_progress", nil, nil)})
	}
	w := startSSEPing(c, rc.s.cfg.KeepAlive, ping)
	defer w.end()
	if w.seqEvent("response.created", gin.H{"response": rc.object("in_progress", nil, nil)}) != nil ||
		w.seqEvent("response.in_progress", gin.H{"response": rc.object("in_progress", nil, nil)}) != nil {
		return
	}
	is := &itemStream{w: w, rc: rc}
	o, r, err := rc.s.runTurn(ctx, rc.m, p, eachDelta(is.send))
	if err != nil {
		failed := rc.object("failed", is.output, nil)
		ae := asAPIError(generationError(ctx, err))
		code := ae.Type
		if ae.Code != nil {
			code = *ae.Code
		}
		failed["error"] = gin.H{"code": code, "message": ae.Message}
		w.seqEvent("response.failed", gin.H{"response": failed})
		return
	}
	if is.done() != nil {
		return
	}
	obj := rc.object("completed", is.output, &o)
	if body, err := json.Marshal(obj); err == nil {
		rc.store(body, r)
	}
	w.seqEvent("response."+obj["status"].(string), gin.H{"response": obj})
}

// asAPIError is err as an API error (a 500 for one that is not).
func asAPIError(err error) *apiError {
	if ae, ok := err.(*apiError); ok {
		return ae
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
}

// storedResponses and storedBytes bound what the server keeps for GET and previous_response_id:
// the latest 256 responses, and no more than 128 MiB of them (a conversation can be as large as
// a request body).
const (
	storedResponses = 256
	storedBytes     = 128 << 20
)

type storedResponse struct {
	response     []byte          // the response object as answered
	conversation json.RawMessage // OpenAI chat messages up to and including its answer
}

// responseStore is a bounded, least-recently-used map of stored responses.
type responseStore struct {
	mu    sync.Mutex
	order *list.List // of ids, most recent first
	byID  map[string]*list.Element
	data  map[string]storedResponse
	bytes int // of the stored responses and conversations
}

func (r storedResponse) size() int { return len(r.response) + len(r.conversation) }

func newResponseStore() *responseStore {
	return &responseStore{order: list.New(), byID: map[string]*list.Element{}, data: map[string]storedResponse{}}
}

func (s *responseStore) put(id string, r storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.size() > storedBytes {
		return // larger than the whole store: not kept (a later previous_response_id gets a 404)
	}
	s.byID[id], s.data[id] = s.order.PushFront(id), r
	s.bytes += r.size()
	for s.order.Len() > storedResponses || s.bytes > storedBytes {
		s.removeLocked(s.order.Back())
	}
}

func (s *responseStore) get(id string) (storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if ok {
		s.order.MoveToFront(e)
	}
	return s.data[id], ok
}

func (s *responseStore) delete(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if ok {
		s.removeLocked(e)
	}
	return ok
}

func (s *responseStore) removeLocked(e *list.Element) {
	id := s.order.Remove(e).(string)
	s.bytes -= s.data[id].size()
	delete(s.byID, id)
	delete(s.data, id)
}
