package server

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"

	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/parse"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/steer"
)

// Constrained decoding: a JSON response format (any object, or a JSON Schema) or a forced tool
// call makes the answer follow a grammar (engine/grammar), applied token by token after the
// reasoning ends. A forced call is generated without reasoning (Qwen's reasoning would delay
// it, and a model that reasons without end would never reach it).

// planGrammar compiles the grammar the turn's answer must follow (nil: none); a schema outside
// the supported subset is a 400 that says why.
func (s *Server) planGrammar(p *turnPlan) error {
	var err error
	switch {
	case p.t.choice.mode == "required":
		p.grammar, err = s.grammars.ToolCalls(grammarTools(p), grammar.ToolsRequired, "")
	case p.t.choice.mode == "named":
		p.grammar, err = s.grammars.ToolCalls(grammarTools(p), grammar.ToolsNamed, p.t.choice.name)
	case p.t.format.kind == "json_object":
		p.grammar = grammar.JSONObject()
	case p.t.format.kind == "json_schema":
		if p.grammar, err = s.grammars.JSONSchema(p.t.format.schema); err != nil {
			return badRequest("the response format's JSON Schema: "+err.Error(), "response_format")
		}
	}
	if err != nil {
		return badRequest("tools: "+err.Error(), "tools")
	}
	return nil
}

func grammarTools(p *turnPlan) []grammar.Tool {
	out := make([]grammar.Tool, len(p.parsed))
	for i, t := range p.parsed {
		out[i] = grammar.Tool{Name: t.Name, Parameters: t.Parameters}
	}
	return out
}

// steer is what shapes the generation token by token (nil: nothing): the thinking budget when
// the prompt opens the reasoning block, and the grammar. With a grammar, the reasoning is cut
// in time for the shortest valid answer to fit in max_tokens.
func (p *turnPlan) steer(m *Model) (func() runner.Steer, error) {
	end, hasEnd := m.Tokenizer.TokenID(parse.ThinkEnd)
	thinking := hasEnd && p.promptEndsInThink()
	closing := m.Tokenizer.Encode(parse.ThinkClose)
	budget := p.budget
	if p.grammar == nil && (!thinking || budget == 0) {
		return nil, nil
	}
	var v *grammar.Vocab
	if p.grammar != nil {
		var err error
		if v, err = m.vocab(); err != nil {
			return nil, err
		}
		if thinking { // reasoning must close in time for the shortest answer
			room := p.g.maxTokens - p.grammar.MinTokens(v) - len(closing)
			if room < 1 {
				return nil, badRequest(fmt.Sprintf("max_tokens %d leaves no room for reasoning before the shortest answer in the requested format (%d tokens): raise it, or turn thinking off", p.g.maxTokens, p.grammar.MinTokens(v)), "max_tokens")
			}
			budget = min(cmp.Or(budget, room), room)
		}
		if _, err := p.grammar.NewMatcher(v, p.g.maxTokens); err != nil {
			var be *grammar.BudgetError
			if errors.As(err, &be) {
				return nil, badRequest(err.Error(), "max_tokens")
			}
			return nil, err
		}
	}
	sep := m.Tokenizer.Encode("\n\n")
	return func() runner.Steer {
		var chain steer.Chain
		if thinking && budget > 0 {
			chain = append(chain, steer.NewBudget(budget, end, closing, true))
		}
		if p.grammar != nil {
			mt, _ := p.grammar.NewMatcher(v, p.g.maxTokens) // it fitted above
			chain = append(chain, steer.NewGrammar(mt, v, p.g.maxTokens, thinking, end, sep, m.StopIDs))
		}
		return chain
	}, nil
}

// vocab is the model's vocabulary for grammars, built on first use.
func (m *Model) vocab() (*grammar.Vocab, error) {
	if m.Vocab == nil {
		return nil, &apiError{Status: http.StatusBadRequest, Message: "this server has no grammar vocabulary: constrained output is not available", Type: "invalid_request_error"}
	}
	v, err := m.Vocab()
	if err != nil {
		return nil, fmt.Errorf("grammar vocabulary: %w", err)
	}
	return v, nil
}
