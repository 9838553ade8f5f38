package server

import (
	"bytes"
	"encoding/json"
	"strings"
)

// visionTokens are the chat template's image markers. A conversation's text may hold them
// literally (an agent reading the source of a vision-language project, or this one): the
// prompt's tokenizer would take them for markers, so the image pads would no longer match the
// images and every later turn of the conversation would fail. Where a prompt holds images,
// escapeVisionText keeps them text.
var visionTokens = []string{"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"}

// visionEscaper writes each marker with a word joiner (U+2060, invisible) after its "<|", so it
// tokenizes as ordinary text.
var visionEscaper = func() *strings.Replacer {
	var pairs []string
	for _, t := range visionTokens {
		pairs = append(pairs, t, "<|\u2060"+t[2:])
	}
	return strings.NewReplacer(pairs...)
}()

// escapeVisionText escapes the image markers in the text of OpenAI chat-shaped messages: string
// contents and text parts. Messages without a marker are returned as they are.
func escapeVisionText(raw json.RawMessage) json.RawMessage {
	// "<" may be written \u003c in the JSON (encoding/json's HTML-safe default).
	if !bytes.Contains(raw, []byte("<|")) && !bytes.Contains(raw, []byte(`\u003c|`)) {
		return raw
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return raw
	}
	changed := false
	for _, m := range msgs {
		if c, ok := escapeContent(m["content"]); ok {
			m["content"], changed = c, true
		}
	}
	if !changed {
		return raw
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		return raw
	}
	return out
}

// escapeContent is a message content with its markers escaped, and whether it changed.
func escapeContent(c json.RawMessage) (json.RawMessage, bool) {
	var s string
	if json.Unmarshal(c, &s) == nil {
		return escapeString(s)
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(c, &parts) != nil {
		return c, false
	}
	changed := false
	for _, p := range parts {
		var t string
		if json.Unmarshal(p["text"], &t) != nil {
			continue
		}
		if e, ok := escapeString(t); ok {
			p["text"], changed = e, true
		}
	}
	if !changed {
		return c, false
	}
	out, _ := json.Marshal(parts)
	return out, true
}

func escapeString(s string) (json.RawMessage, bool) {
	e := visionEscaper.Replace(s)
	if e == s {
		return nil, false
	}
	out, _ := json.Marshal(e)
	return out, true
}
