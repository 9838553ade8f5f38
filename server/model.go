package server

import (
	"errors"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/tokenizer"
)

// TokenizerOf adapts Lily's tokenizer to the server's interface.
func TokenizerOf(t *tokenizer.Tokenizer) Tokenizer { return tok{t} }

type tok struct{ *tokenizer.Tokenizer }

func (t tok) NewStream() TextStream { return t.NewStreamDecoder() }

// TemplateOf adapts a chat template to the server's interface.
func TemplateOf(t *chat.Template) Template { return tmpl{t} }

type tmpl struct{ *chat.Template }

func (t tmpl) Render(req RenderRequest) (string, error) {
	out, err := t.Template.Render(req)
	if err == nil {
		return out, nil
	}
	// The template is the checkpoint's own: when it fails (raise_exception, unreadable input, or
	// a message shape it cannot handle, like a tool_calls string) the request is what is wrong.
	var te *chat.TemplateError
	var ie *chat.InputError
	if errors.As(err, &ie) {
		return "", ie
	}
	if errors.As(err, &te) {
		return "", &TemplateError{Msg: te.Msg}
	}
	return "", &TemplateError{Msg: err.Error()}
}
