package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/lilyformac/lily/engine/sample"
)

// samplingFields are the sampling fields every dialect reads into a turn (and text completions
// into their generation): OpenAI's names; the other dialects map theirs onto them.
type samplingFields struct {
	Temperature       *float32           `json:"temperature"`
	TopP              *float32           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float32           `json:"min_p"`
	PresencePenalty   *float32           `json:"presence_penalty"`
	FrequencyPenalty  *float32           `json:"frequency_penalty"`
	RepetitionPenalty *float32           `json:"repetition_penalty"`
	Seed              *int64             `json:"seed"`
	Stop              json.RawMessage    `json:"stop"`
	LogitBias         map[string]float32 `json:"logit_bias"`
	N                 *int               `json:"n"`
}

// qwenDefaults are Qwen's recommended sampling settings for Qwen3.6.
func qwenDefaults(thinking bool) sample.Params {
	if thinking {
		return sample.Params{Temperature: 1.0, TopP: 0.95, TopK: 20}
	}
	return sample.Params{Temperature: 0.7, TopP: 0.8, TopK: 20, PresencePenalty: 1.5}
}

// params applies the request's explicit values over defaults and validates them.
func (f samplingFields) params(def sample.Params, vocab int) (sample.Params, []string, error) {
	p := def
	p.VocabLimit = vocab
	if f.N != nil && *f.N != 1 {
		return p, nil, badRequest("n must be 1: Lily generates one choice per request", "n")
	}
	if f.Temperature != nil {
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		p.TopK = max(*f.TopK, 0) // -1 (vLLM's "off") and 0 both disable top-k
	}
	if f.MinP != nil {
		p.MinP = *f.MinP
	}
	if f.PresencePenalty != nil {
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.FrequencyPenalty != nil {
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.RepetitionPenalty != nil {
		p.RepetitionPenalty = *f.RepetitionPenalty
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	if len(f.LogitBias) > 0 {
		p.LogitBias = map[int]float32{}
		for k, v := range f.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil {
				return p, nil, badRequest(fmt.Sprintf("logit_bias: key %q is not a token id", k), "logit_bias")
			}
			p.LogitBias[id] = v
		}
	}
	if err := p.Validate(); err != nil {
		return p, nil, badRequest(err.Error(), "")
	}
	stops, err := stopStrings(f.Stop)
	return p, stops, err
}

// stopStrings reads `stop`: a string, a list of up to 16 strings, or null.
func stopStrings(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop must be a string or a list of strings", "stop")
	}
	if len(list) > 16 {
		return nil, badRequest("stop: at most 16 sequences", "stop")
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}
