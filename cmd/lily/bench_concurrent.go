package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/metal/mtl"
)

// concurrentOutput is `lily bench --concurrent N --output json`: N greedy requests sent at once
// through the engine loop, against each run alone first (the baseline, same run).
type concurrentOutput struct {
	SchemaVersion int    `json:"schema_version"`
	Backend       string `json:"backend"`
	Sequences     int    `json:"sequences"`
	PromptTokens  int    `json:"prompt_tokens"` // per request
	DecodeSteps   int    `json:"decode_steps"`  // tokens per request after its first
	// Seconds is the wall time from sending the N requests to the last answer. AggregateTokS is
	// their decode rate together: every request's tokens after its first, over the span from the
	// first token of any to the last of any (so prefills that overlap decoding count against it).
	Seconds       float64 `json:"seconds"`
	AggregateTokS float64 `json:"aggregate_tok_s"`
	// SoloDecodeTokS is request 0's decode rate alone; Speedup the aggregate over it.
	SoloDecodeTokS float64             `json:"solo_decode_tok_s"`
	Speedup        float64             `json:"speedup"`
	AllEqualSolo   bool                `json:"all_equal_solo"`
	Requests       []concurrentRequest `json:"requests"`
	// Drafts, with --drafts other than off: the same requests with drafting (Mode) against
	// drafting off, in the same run (the figures above are drafting's).
	Drafts *concurrentDrafts `json:"drafts,omitempty"`
}

// concurrentDrafts compares a concurrent run with drafting to one without.
type concurrentDrafts struct {
	Mode             string  `json:"mode"`
	OffAggregateTokS float64 `json:"off_aggregate_tok_s"`
	Ratio            float64 `json:"ratio"` // aggregate tok/s with drafting over without
	EqualToOff       bool    `json:"equal_to_off"`
	Drafted          int64   `json:"drafted"`
	Accepted         int64   `json:"accepted"`
}

// concurrentRequest is one request's view of the concurrent run.
type concurrentRequest struct {
	Tokens     int     `json:"tokens"`
	TTFT       float64 `json:"ttft_s"`        // from sending to its first token
	DecodeTokS float64 `json:"decode_tok_s"`  // its tokens after the first over their span
	LongestGap float64 `json:"longest_gap_s"` // between two of its tokens
	EqualsSolo bool    `json:"equals_solo"`   // its tokens are those it got alone
}

// runBenchConcurrent runs o.concurrent greedy requests of o.ctx prompt tokens (different
// prompts) and o.steps more tokens each, alone and then at once.
func runBenchConcurrent(cmd *cobra.Command, o benchOptions) error {
	n := o.concurrent
	if n < 1 || n > maxParallel {
		return fmt.Errorf("--concurrent %d: expected 1 to %d requests", n, maxParallel)
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{kvBits: o.kvBits, prefillChunk: o.prefillChunk, parallel: n, prefillRoute: o.prefillRoute})
	if err != nil {
		return err
	}
	defer closeBackend()
	if c := b.Describe().Context; c > 0 && o.ctx+o.steps+1 > c {
		return fmt.Errorf("--ctx %d + %d steps exceed the context of %d", o.ctx, o.steps, c)
	}
	reqs := make([]runner.Request, n)
	for i := range reqs {
		p := benchPrompt(o.ctx+i, cfg.VocabSize)[i:] // the anchor's prompt, shifted: each differs
		reqs[i] = runner.Request{Prompt: p, MaxTokens: o.steps + 1, NoCache: true}
	}
	var off []timedRun
	var offWall time.Duration
	if o.drafts != runner.DraftsOff {
		if _, off, offWall, err = measureConcurrent(cmd.Context(), runner.New(b, concurrentOptions(n, runner.DraftsOff)), reqs, false); err != nil {
			return err
		}
	}
	r := runner.New(b, concurrentOptions(n, o.drafts))
	solo, together, wall, err := measureConcurrent(cmd.Context(), r, reqs, true)
	if err != nil {
		return err
	}
	out := concurrentReport(o, solo, together, wall)
	out.Backend = o.backend
	if off != nil {
		out.Drafts = compareDrafts(o, r, solo, off, offWall, out.AggregateTokS)
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	return printConcurrent(cmd, out)
}

// concurrentOptions are the runner's for n requests at once with drafting in mode.
func concurrentOptions(n int, mode string) runner.Options {
	return runner.Options{Parallel: n, CheckpointEvery: -1, Hold: mtl.BeginActivity, Drafts: runner.DraftOptions{Mode: mode}}
}

// measureConcurrent runs reqs one at a time (when solo is set) and then all at once on r.
func measureConcurrent(ctx context.Context, r *runner.Runner, reqs []runner.Request, solo bool) (alone, together []timedRun, wall time.Duration, err error) {
	n := len(reqs)
	if solo {
		alone = make([]timedRun, n)
		for i, req := range reqs {
			if alone[i], err = timedGenerate(ctx, r, req, time.Now()); err != nil {
				return nil, nil, 0, err
			}
		}
	}
	together = make([]timedRun, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { together[i], errs[i] = timedGenerate(ctx, r, req, start) })
	}
	wg.Wait()
	wall = time.Since(start)
	for _, err := range errs {
		if err != nil {
			return nil, nil, 0, err
		}
	}
	return alone, together, wall, nil
}

// compareDrafts sets the concurrent run with drafting (aggregate tok/s agg, on r) against off.
func compareDrafts(o benchOptions, r *runner.Runner, solo, off []timedRun, offWall time.Duration, agg float64) *concurrentDrafts {
	base := concurrentReport(o, solo, off, offWall)
	st := r.DraftStats()
	d := &concurrentDrafts{Mode: o.drafts, OffAggregateTokS: base.AggregateTokS, EqualToOff: base.AllEqualSolo, Drafted: st.Drafted, Accepted: st.Accepted}
	if base.AggregateTokS > 0 {
		d.Ratio = round3(agg / base.AggregateTokS)
	}
	return d
}

// timedRun is one request's tokens and their arrival times.
type timedRun struct {
	ids   []int
	times []time.Time
	sent  time.Time
}

func timedGenerate(ctx context.Context, r *runner.Runner, req runner.Request, sent time.Time) (timedRun, error) {
	t := timedRun{sent: sent}
	_, err := r.Generate(ctx, req, func(tok runner.Token) (bool, error) {
		t.ids, t.times = append(t.ids, tok.ID), append(t.times, time.Now())
		return false, nil
	})
	return t, err
}

// decodeRate is a run's tokens after the first over the time they took.
func (t timedRun) decodeRate() float64 {
	if len(t.times) < 2 {
		return 0
	}
	return rate(len(t.times)-1, t.times[len(t.times)-1].Sub(t.times[0]).Seconds())
}

func (t timedRun) longestGap() time.Duration {
	var g time.Duration
	for i := 1; i < len(t.times); i++ {
		g = max(g, t.times[i].Sub(t.times[i-1]))
	}
	return g
}

func concurrentReport(o benchOptions, solo, together []timedRun, wall time.Duration) concurrentOutput {
	out := concurrentOutput{SchemaVersion: 1, Sequences: len(solo), PromptTokens: o.ctx, DecodeSteps: o.steps,
		Seconds: wall.Seconds(), SoloDecodeTokS: solo[0].decodeRate(), AllEqualSolo: true}
	total := 0
	first, last := together[0].times[0], together[0].times[0]
	for i, t := range together {
		total += len(t.ids) - 1
		first, last = minTime(first, t.times[0]), maxTime(last, t.times[len(t.times)-1])
		eq := slices.Equal(t.ids, solo[i].ids)
		out.AllEqualSolo = out.AllEqualSolo && eq
		out.Requests = append(out.Requests, concurrentRequest{Tokens: len(t.ids), TTFT: round3(t.times[0].Sub(t.sent).Seconds()),
			DecodeTokS: round3(t.decodeRate()), LongestGap: round3(t.longestGap().Seconds()), EqualsSolo: eq})
	}
	out.AggregateTokS = rate(total, last.Sub(first).Seconds())
	if out.SoloDecodeTokS > 0 {
		out.Speedup = round3(out.AggregateTokS / out.SoloDecodeTokS)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func printConcurrent(cmd *cobra.Command, o concurrentOutput) error {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "backend %s  %d requests at once  %d prompt tokens  %d decode steps each\n", o.Backend, o.Sequences, o.PromptTokens, o.DecodeSteps)
	fmt.Fprintf(w, "aggregate %.2f tok/s over %.3f s  (one request alone: %.2f tok/s decode; %.2f×)  all equal to their solo runs: %v\n",
		o.AggregateTokS, o.Seconds, o.SoloDecodeTokS, o.Speedup, o.AllEqualSolo)
	for i, r := range o.Requests {
		fmt.Fprintf(w, "  request %d: %d tokens  first after %.3f s  %.2f tok/s  longest gap %.3f s  equal to solo %v\n", i, r.Tokens, r.TTFT, r.DecodeTokS, r.LongestGap, r.EqualsSolo)
	}
	if d := o.Drafts; d != nil {
		fmt.Fprintf(w, "drafts %s: %.2f tok/s against %.2f with drafts off (%.3f×); %d drafted, %d accepted; the same tokens as off: %v\n",
			d.Mode, o.AggregateTokS, d.OffAggregateTokS, d.Ratio, d.Drafted, d.Accepted, d.EqualToOff)
	}
	return nil
}
