package server

import (
	"encoding/json"
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

func (t tmpl) Render(messages, tools json.RawMessage, addGen bool, kwargs map[string]json.RawMessage) (string, error) {
	out, err := t.Template.Render(chat.Request{Messages: messages, Tools: tools, AddGenerationPrompt: addGen, Kwargs: kwargs})
	var te *chat.TemplateError
	var ie *chat.InputError
	switch {
	case errors.As(err, &te):
		return "", &TemplateError{Msg: te.Msg}
	case errors.As(err, &ie):
		return "", &TemplateError{Msg: ie.Error()}
	}
	return out, err
}
