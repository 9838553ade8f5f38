package server

import (
	"bytes"
	"encoding/json"
	"log"
)

// The model's vision tower does not run yet, so an image a client sends becomes imagePlaceholder
// where it stood, in every dialect, rather than a 400: an image a server refuses stays in an
// agent's history, and every later turn of the session would fail the same way.
const imagePlaceholder = "[an image was attached here; this server cannot see images yet]"

// imagePartTypes are the content part types that carry an image in OpenAI's chat shape (and the
// Responses and generic shapes some clients send there).
var imagePartTypes = map[string]bool{"image_url": true, "input_image": true, "image": true}

// placeholderImages rewrites the image parts of OpenAI chat-shaped messages as text parts holding
// imagePlaceholder; messages with none are returned as they are.
func placeholderImages(raw json.RawMessage) json.RawMessage {
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return raw // checkMessages says what is wrong
	}
	changed := false
	for _, m := range msgs {
		c := bytes.TrimSpace(m["content"])
		var parts []map[string]json.RawMessage
		if len(c) == 0 || c[0] != '[' || json.Unmarshal(c, &parts) != nil {
			continue
		}
		replaced := false
		for i, p := range parts {
			var typ string
			if json.Unmarshal(p["type"], &typ) == nil && imagePartTypes[typ] {
				text, _ := json.Marshal(imagePlaceholder)
				parts[i] = map[string]json.RawMessage{"type": json.RawMessage(`"text"`), "text": text}
				replaced = true
			}
		}
		if replaced {
			m["content"], _ = json.Marshal(parts)
			changed = true
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

// logPlaceholders says in serve's log how many images the turn's prompt holds as placeholders
// (every dialect has turned its images into imagePlaceholder by now), so a user who wonders why
// the model did not see a screenshot finds why.
func logPlaceholders(t *turn) {
	n := bytes.Count(t.messages, []byte(imagePlaceholder))
	if t.prompt != nil {
		n += bytes.Count([]byte(*t.prompt), []byte(imagePlaceholder))
	}
	if n > 0 {
		log.Printf("server: %d image(s) in the prompt are a text placeholder: this build does not run the vision tower yet", n)
	}
}
