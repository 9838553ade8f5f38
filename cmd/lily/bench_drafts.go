package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/internal/agenttrace"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/resources"
)

// draftStats is `lily bench --drafts`' figures for a turn or the whole trace. The gate picks K
// from each chip's cost model, so the steps and what was drafted are per chip (they agree
// wherever every step is bound by memory traffic, whose ratios are the same on every chip).
type draftStats struct {
	Turn           int                `json:"turn,omitempty"`
	PromptTokens   int                `json:"prompt_tokens,omitempty"`
	Tokens         int                `json:"tokens"` // decoded: the reply's tokens after the first, which the prefill gives
	Steps          map[string]int     `json:"steps"`
	Drafted        map[string]int     `json:"drafted"`
	Accepted       map[string]int     `json:"accepted"`
	TokensPerStep  map[string]float64 `json:"tokens_per_step"`
	ModeledSpeedup map[string]float64 `json:"modeled_speedup"` // plain decoding's modeled time over drafting's
}

// draftsOutput is `lily bench --drafts --output json`.
type draftsOutput struct {
	Drafts struct {
		Trace     string `json:"trace"`
		Tokenizer string `json:"tokenizer"`
		KVBits    int    `json:"kv_bits"`
		draftStats
		Turns []draftStats `json:"turns"`
	} `json:"drafts"`
}

func newDraftStats() draftStats {
	return draftStats{Steps: map[string]int{}, Drafted: map[string]int{}, Accepted: map[string]int{},
		TokensPerStep: map[string]float64{}, ModeledSpeedup: map[string]float64{}}
}

// set records chip's figures t.
func (s *draftStats) set(chip string, t agenttrace.DraftTurn) {
	s.Tokens = t.Tokens
	s.Steps[chip], s.Drafted[chip], s.Accepted[chip] = t.Steps, t.Drafted, t.Accepted
	s.TokensPerStep[chip], s.ModeledSpeedup[chip] = 1, round3(t.Speedup())
	if t.Steps > 0 {
		s.TokensPerStep[chip] = round3(float64(t.Tokens) / float64(t.Steps))
	}
}

// runBenchDrafts replays the trace teacher-forced through the suffix drafter and the cost gate
// over each chip's modeled step (agenttrace.Drafts): the recorded replies are the output, so it
// needs the tokenizer and chat template only, no weights.
func runBenchDrafts(cmd *cobra.Command, o benchOptions) error {
	if err := checkDrafts(o); err != nil {
		return err
	}
	chips, err := draftChips(o.profile.chip)
	if err != nil {
		return err
	}
	tr, err := agenttrace.Load(o.trace)
	if err != nil {
		return err
	}
	tmpl, tok, source, err := draftsTokenizer(o.model)
	if err != nil {
		return err
	}
	turns, err := agenttrace.Force(tr, tmpl, tok)
	if err != nil {
		return fmt.Errorf("%s: %w", o.trace, err)
	}
	if len(turns) == 0 {
		return fmt.Errorf("%s: no turn has a recorded reply to replay", o.trace)
	}
	var out draftsOutput
	d := &out.Drafts
	d.Trace, d.Tokenizer, d.KVBits, d.draftStats = o.trace, source, o.kvBits, newDraftStats()
	d.Turns = make([]draftStats, len(turns))
	for i, f := range turns {
		d.Turns[i] = newDraftStats()
		d.Turns[i].Turn, d.Turns[i].PromptTokens = f.Turn, len(f.Prompt)
	}
	if err := replayDrafts(&out, turns, chips); err != nil {
		return err
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	return printDrafts(cmd.OutOrStdout(), &out, chips)
}

// replayDrafts runs the teacher-forced replay once per chip (the gate's choices follow its
// costs) and records each chip's figures per turn and in all.
func replayDrafts(out *draftsOutput, turns []agenttrace.Forced, chips []plan.Chip) error {
	maxCtx := 2
	for _, f := range turns {
		maxCtx = max(maxCtx, len(f.Prompt)+len(f.Reply)+draft.MaxRows)
	}
	d := &out.Drafts
	for _, chip := range chips {
		cost, err := decode.NewGroupModel(config.Production(), maxCtx, d.KVBits, chip)
		if err != nil {
			return err
		}
		var total agenttrace.DraftTurn
		for i, t := range agenttrace.Drafts(turns, cost) {
			d.Turns[i].set(chip.Name, t)
			total.Add(t)
		}
		d.set(chip.Name, total)
	}
	return nil
}

// checkDrafts rejects what --drafts cannot combine with.
func checkDrafts(o benchOptions) error {
	switch {
	case o.trace == "":
		return errors.New("--drafts replays an agent trace: give --agent-trace FILE")
	case o.plan || o.profile.on || o.concurrent > 0 || o.image != "":
		return errors.New("--drafts is a replay of its own: drop --plan, --profile, --concurrent and --image")
	case o.demo && o.model != "":
		return errors.New("--demo and --model are exclusive")
	case o.kvBits != 16 && o.kvBits != 8:
		return fmt.Errorf("--kv-bits %d: expected 16 or 8", o.kvBits)
	}
	return nil
}

// draftChips are the chips --chip names (comma-separated), else prefillChips.
func draftChips(names string) ([]plan.Chip, error) {
	if strings.TrimSpace(names) == "" {
		return prefillChips, nil
	}
	var out []plan.Chip
	for _, n := range strings.Split(names, ",") {
		c, ok := plan.ChipNamed(n)
		if !ok {
			return nil, fmt.Errorf("--chip %q: not a chip Lily models (%s)", strings.TrimSpace(n), chipNames())
		}
		out = append(out, c)
	}
	return out, nil
}

func chipNames() string {
	var names []string
	for _, c := range plan.Chips {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// draftsTokenizer is the checkpoint's template and tokenizer (dir given: its files only, no
// weights), else the built-in template and the demo model's tokenizer, and what they are.
func draftsTokenizer(dir string) (*chat.Template, *tokenizer.Tokenizer, string, error) {
	if dir != "" {
		tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			return nil, nil, "", err
		}
		tmpl, err := chat.Load(dir)
		return tmpl, tok, dir, err
	}
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		return nil, nil, "", err
	}
	tok, err := tokenizer.LoadJSON(raw)
	return chat.Builtin(), tok, "built-in (the demo model's Qwen3 tokenizer, the Qwen3.6 chat template)", err
}

// printDrafts is the text form: tokens per step and modeled speed-up per turn and chip, then
// per chip the totals and the mean and least of the turns' speed-ups.
func printDrafts(w io.Writer, out *draftsOutput, chips []plan.Chip) error {
	d := &out.Drafts
	fmt.Fprintf(w, "%s teacher-forced: suffix drafter, gate over the modeled step (%d-bit KV)\ntokenizer: %s\n%20s", d.Trace, d.KVBits, d.Tokenizer, "")
	for _, c := range chips {
		fmt.Fprintf(w, "  %17s", c.Name)
	}
	fmt.Fprint(w, "\nturn  prompt  tokens")
	for range chips {
		fmt.Fprint(w, "  tok/step  speedup")
	}
	fmt.Fprintln(w)
	for _, t := range append(d.Turns, d.draftStats) {
		if t.Turn > 0 {
			fmt.Fprintf(w, "%4d  %6d  %6d", t.Turn, t.PromptTokens, t.Tokens)
		} else {
			fmt.Fprintf(w, "total %14d", t.Tokens)
		}
		for _, c := range chips {
			fmt.Fprintf(w, "  %8.2f %7.3f×", t.TokensPerStep[c.Name], t.ModeledSpeedup[c.Name])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "chip      steps  drafted  accepted  turns' speed-up: mean  least")
	for _, c := range chips {
		mean, least := turnSpeedups(d.Turns, c.Name)
		fmt.Fprintf(w, "%-8s %6d  %7d  %8d  %20.3f× %6.3f×\n", c.Name, d.Steps[c.Name], d.Drafted[c.Name], d.Accepted[c.Name], mean, least)
	}
	return nil
}

// turnSpeedups is the mean and the least of chip's per-turn speed-ups.
func turnSpeedups(turns []draftStats, chip string) (mean, least float64) {
	least = math.Inf(1)
	for _, t := range turns {
		v := t.ModeledSpeedup[chip]
		mean += v / float64(len(turns))
		least = min(least, v)
	}
	return mean, least
}
