// Package profile times every kernel of the GPU backend's decode step, and of one prefill chunk,
// each dispatch alone, against the decode plan's modeled bytes and FLOPs (`lily bench --profile`
// and the profiles of `lily doctor --selftest --report`), and the decode step of 1 to 8
// sequences at a few contexts against the group model's time (`lily bench --profile --rows`: a
// chip's calibration).
package profile

import (
	"context"
	"errors"
	"fmt"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/plan"
)

// DefaultSteps is how many decode steps a profile times unless told otherwise.
const DefaultSteps = 4

// Options say what Run profiles, and how its output names the device.
type Options struct {
	Context int       // positions cached before the decode step and the chunk
	Prefill int       // the prefill chunk's tokens; 0 profiles the decode step only
	Steps   int       // decode steps timed
	Warmup  bool      // run the decode step and the chunk once, untimed, before timing them
	Chip    plan.Chip // the chip whose peak bandwidth Kernel.PeakShare is a share of; zero: none
	Device  string    // the device as the output names it
}

// Positions is how many positions the backend's context must hold for Run: the prompt, then
// the longer of the chunk (M + 1 tokens) and the decode steps.
func (o Options) Positions() int { return o.Context + max(o.Prefill+1, o.warm()+o.Steps) + 1 }

// PromptLen is how many prompt tokens Run needs.
func (o Options) PromptLen() int { return o.Context + o.Prefill + 1 }

func (o Options) warm() int {
	if o.Warmup {
		return 1
	}
	return 0
}

// Run profiles g's decode step after o.Context tokens of prompt (as a sampled request runs it),
// then with o.Prefill one chunk of that many prompt tokens from the same cached state. g's plan
// must have the chunk's mode (gpu.GPUOptions.Chunks).
func Run(ctx context.Context, g *gpu.GPU, prompt []int, o Options) (*Output, error) {
	if len(prompt) < o.PromptLen() {
		return nil, fmt.Errorf("profile: %d prompt tokens, want %d", len(prompt), o.PromptLen())
	}
	if o.Steps < 1 || o.Context < 1 || o.Prefill < 0 {
		return nil, fmt.Errorf("profile: %d steps after %d tokens, a chunk of %d: expected at least one step after at least one token", o.Steps, o.Context, o.Prefill)
	}
	s, ok := g.NewSession().(*gpu.Session)
	if !ok {
		return nil, errors.New("gpu: not a GPU session")
	}
	defer s.Close()
	if _, err := s.Forward(prompt[:o.Context], false); err != nil {
		return nil, err
	}
	var snap backend.Snapshot // the prompt's state, for the prefill chunk
	if o.Prefill > 0 {
		var err error
		if snap, err = s.Save(); err != nil {
			return nil, err
		}
		defer snap.Close()
	}
	var out Output
	var err error
	if out.Profile, err = decodeStep(ctx, g, s, prompt, o); err != nil {
		return nil, err
	}
	if o.Prefill > 0 {
		if out.PrefillProfile, err = prefillChunk(g, snap, prompt[o.Context:o.Context+o.Prefill+1], o); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// decodeStep profiles the decode step as a sampled request runs it (bench --plan's mode): a
// warm-up step, then the timed ones.
func decodeStep(ctx context.Context, g *gpu.GPU, s *gpu.Session, prompt []int, o Options) (*Step, error) {
	seed := uint64(1)
	params := sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.8, Seed: &seed}
	generate := func(n int) error { // n steps: the greedy token Forward left, then n−1 more
		_, err := g.ContinueRows(ctx, []backend.GenRow{{Session: s, Params: params, Prompt: prompt[:s.Pos()], Generated: []int{s.NextToken()}, Max: n - 1}})
		return err
	}
	if warm := o.warm(); warm > 0 {
		if err := generate(warm); err != nil {
			return nil, err
		}
	}
	p, err := timed(g, s, s.Pos(), decode.ModeSample, o.Chip, func() error { return generate(o.Steps) })
	if err != nil {
		return nil, err
	}
	p.fill(g, o)
	return p, nil
}

// prefillChunk profiles one chunk of o.Prefill tokens after o.Context, from the prompt's
// snapshot: tokens are M + 1, so the chunk runs in its plain mode (Run) and the last token
// through the decode step.
func prefillChunk(g *gpu.GPU, snap backend.Snapshot, tokens []int, o Options) (*Step, error) {
	var p *Step
	run := func(profiled bool) error {
		rs, err := snap.Restore()
		if err != nil {
			return err
		}
		defer rs.Close()
		r, ok := rs.(*gpu.Session)
		if !ok {
			return errors.New("gpu: not a GPU session")
		}
		forward := func() error {
			_, err := r.Forward(tokens, false)
			return err
		}
		if !profiled {
			return forward()
		}
		p, err = timed(g, r, o.Context, decode.ChunkModes(o.Prefill).Run, o.Chip, forward)
		return err
	}
	if o.Warmup {
		if err := run(false); err != nil {
			return nil, err
		}
	}
	if err := run(true); err != nil {
		return nil, err
	}
	p.Chunk = o.Prefill
	p.fill(g, o)
	return p, nil
}

// timed times what run runs on s and sums it by kernel for the steps in mode, against the
// plan's model at ctx cached positions.
func timed(g *gpu.GPU, s *gpu.Session, ctx int, mode string, chip plan.Chip, run func() error) (*Step, error) {
	model, step, err := g.ModelPlan(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.StartProfile(); err != nil {
		return nil, err
	}
	err = run()
	timings := s.StopProfile()
	if err != nil {
		return nil, err
	}
	return newStep(model, step.Plan.Stats(mode), timings, mode, ctx, chip)
}
