package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/lilyformac/lily/engine/images"
)

// Images in every dialect. Each dialect writes an image where it stood as an OpenAI chat
// image_url part (inline bytes as a data URL); before the prompt is rendered, every image part is
// encoded (images.Encoder) and becomes the template's image item, or, when Lily cannot use it
// (vision off, a corrupt or unsupported file, a remote URL not allowed, over a limit), a short
// text placeholder saying why, and a line in serve's log. Never a 400: an image a server refuses
// stays in an agent's history, and every later turn of the session would fail the same way.

// imagePlaceholder is the text an image Lily cannot use becomes; why says what went wrong.
func imagePlaceholder(why string) string {
	return "[an image was attached here but cannot be seen: " + why + "]"
}

// imagePartTypes are the content part types that carry an image in OpenAI's chat shape (and the
// Responses and generic shapes some clients send there).
var imagePartTypes = map[string]bool{"image_url": true, "input_image": true, "image": true}

// oaPart is one part of an OpenAI chat message's content list: text, or an image by URL.
type oaPart struct {
	Type     string      `json:"type"`
	Text     string      `json:"text,omitempty"`
	ImageURL *oaImageURL `json:"image_url,omitempty"`
}

type oaImageURL struct {
	URL string `json:"url"`
}

// content builds a translated message's content in order: a plain string while it holds only
// text (as every message did before images), parts once an image is in it.
type content struct {
	parts []oaPart
	text  strings.Builder
}

func (c *content) addText(s string) { c.text.WriteString(s) }

// addImage adds an image by URL (a data URL for inline bytes).
func (c *content) addImage(url string) {
	c.flush()
	c.parts = append(c.parts, oaPart{Type: "image_url", ImageURL: &oaImageURL{URL: url}})
}

func (c *content) flush() {
	if c.text.Len() > 0 {
		c.parts = append(c.parts, oaPart{Type: "text", Text: c.text.String()})
		c.text.Reset()
	}
}

// empty reports whether nothing was added.
func (c *content) empty() bool { return c.text.Len() == 0 && len(c.parts) == 0 }

// set writes the content into m: Content alone, or Parts when it holds an image.
func (c *content) set(m *oaMessage) {
	if len(c.parts) == 0 {
		m.Content = c.text.String()
		return
	}
	c.flush()
	m.Parts = c.parts
}

// dataURL is inline image bytes, base64 already, as a data URL (the media type is a hint only:
// the bytes are sniffed).
func dataURL(mediaType, base64 string) string {
	if mediaType == "" {
		mediaType = "image/*"
	}
	return "data:" + mediaType + ";base64," + base64
}

// resolved is what resolveImages made of a conversation's images.
type resolved struct {
	images       []*images.Encoded // the images the prompt holds, in order
	placeholders int               // the images that became placeholders
}

// resolveImages encodes the image parts of OpenAI chat-shaped messages in order: each becomes
// the template's {"type": "image"} item, or a placeholder text part saying why Lily cannot use
// it. Messages with no image are returned as they are.
func resolveImages(ctx context.Context, enc *images.Encoder, why string, raw json.RawMessage) (json.RawMessage, resolved, error) {
	var res resolved
	out, err := rewriteImages(raw, func(part map[string]json.RawMessage) map[string]json.RawMessage {
		return res.resolve(ctx, enc, why, part)
	})
	return out, res, err
}

// countImages is resolveImages without the tower, for counting a prompt's tokens: each image is
// the template's item (it renders one pad token) and its token count is added to extra, or the
// placeholder it would become.
func countImages(enc *images.Encoder, why string, raw json.RawMessage) (json.RawMessage, int, error) {
	extra := 0
	out, err := rewriteImages(raw, func(part map[string]json.RawMessage) map[string]json.RawMessage {
		ref, err := imageRef(part)
		n := 0
		switch {
		case err != nil:
		case enc == nil:
			err = errors.New(cmp.Or(why, "this server runs no vision tower"))
		default:
			n, err = enc.Tokens(ref)
		}
		if err != nil {
			return placeholderPart(err)
		}
		extra += n - 1
		return map[string]json.RawMessage{"type": json.RawMessage(`"image"`)}
	})
	return out, extra, err
}

// rewriteImages replaces each image part of OpenAI chat-shaped messages, in order, by what f
// makes of it; messages with none are returned as they are.
func rewriteImages(raw json.RawMessage, f func(part map[string]json.RawMessage) map[string]json.RawMessage) (json.RawMessage, error) {
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil {
		return raw, nil // checkMessages says what is wrong
	}
	changed := false
	for _, m := range msgs {
		c := bytes.TrimSpace(m["content"])
		var parts []map[string]json.RawMessage
		if len(c) == 0 || c[0] != '[' || json.Unmarshal(c, &parts) != nil {
			continue
		}
		found := false
		for i, p := range parts {
			var typ string
			if json.Unmarshal(p["type"], &typ) != nil || !imagePartTypes[typ] {
				continue
			}
			parts[i], found = f(p), true
		}
		if found {
			m["content"], _ = json.Marshal(parts)
			changed = true
		}
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(msgs)
}

// resolve turns one image part into the template's image item or a placeholder text part.
func (r *resolved) resolve(ctx context.Context, enc *images.Encoder, why string, part map[string]json.RawMessage) map[string]json.RawMessage {
	ref, err := imageRef(part)
	var im *images.Encoded
	switch {
	case err != nil:
	case enc == nil:
		err = errors.New(cmp.Or(why, "this server runs no vision tower"))
	default:
		im, err = enc.Encode(ctx, ref)
	}
	if err != nil {
		r.placeholders++
		log.Printf("server: an image became a placeholder: %v", err)
		return placeholderPart(err)
	}
	r.images = append(r.images, im)
	return map[string]json.RawMessage{"type": json.RawMessage(`"image"`)}
}

// placeholderPart is the text part an image Lily cannot use becomes.
func placeholderPart(err error) map[string]json.RawMessage {
	text, _ := json.Marshal(imagePlaceholder(shortReason(err)))
	return map[string]json.RawMessage{"type": json.RawMessage(`"text"`), "text": text}
}

// imageRef is an image part's URL: image_url as {url} or as a string (Responses' input_image),
// or a generic part's image field.
func imageRef(part map[string]json.RawMessage) (string, error) {
	for _, key := range []string{"image_url", "image"} {
		raw := bytes.TrimSpace(part[key])
		if len(raw) == 0 {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s, nil
		}
		var obj struct {
			URL string `json:"url"`
		}
		if json.Unmarshal(raw, &obj) == nil && obj.URL != "" {
			return obj.URL, nil
		}
	}
	return "", errors.New("the image part has no URL or data")
}

// shortReason is an error as the placeholder says it: its first line, at most 160 bytes.
func shortReason(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// imagesInPrompt resolves a turn's images before its prompt is rendered.
func (s *Server) imagesInPrompt(ctx context.Context, m *Model, p *turnPlan) error {
	if p.t.prompt != nil {
		return nil
	}
	msgs, res, err := resolveImages(ctx, m.Images, m.VisionWhy, p.t.messages)
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if len(res.images) > 0 {
		msgs = escapeVisionText(msgs)
	}
	p.t.messages, p.images = msgs, res.images
	if res.placeholders > 0 {
		s.metrics.imagePlaceholders.Add(float64(res.placeholders))
	}
	return nil
}
