package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/vit"
)

type benchOptions struct {
	model, backend, output, trace string
	image                         string // --image: measure an image's encode and first token
	ctx, steps, traceTokens       int
	kvBits, prefillChunk          int
	prefillRoute                  gpu.RouteChoice
	prefill, batch                int
	cacheMB, concurrent, agents   int
	warmup, plan, demo            bool
	drafts                        string         // --drafts: the runner's mode; given with --agent-trace, the modeled replay
	profile                       profileOptions // --profile (bench_profile.go)
}

// benchOutput follows the measurement contract of Perplexity's lily engine, so figures compare:
// the same synthetic prompt, one warm-up, one measured prefill, then greedy decode steps.
type benchOutput struct {
	SchemaVersion int        `json:"schema_version"`
	Backend       string     `json:"backend"`
	Context       int        `json:"context"`
	Prefill       benchPhase `json:"prefill"`
	Decode        benchPhase `json:"decode"`
	TokenIDs      []int      `json:"token_ids"`
	Digest        string     `json:"digest_fnv1a64"`
	// PrefillChunks are the batched prefill's chunk sizes on a GPU backend, largest first (none:
	// the prompt ran token by token), so a prefill figure says what produced it.
	PrefillChunks []int `json:"prefill_chunks,omitempty"`
}

type benchPhase struct {
	Tokens  int     `json:"tokens"`
	Seconds float64 `json:"seconds"`
	TokS    float64 `json:"tok_s"`
}

func newBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench (--model DIR | --demo) [--ctx N] | bench --plan [--ctx N] [--prefill M | --batch B] | bench (--model DIR | --demo) --agent-trace FILE | bench --profile (--model DIR | --demo) [--ctx N] [--prefill M | --rows[=N] [--contexts LIST]] | bench --drafts --agent-trace FILE [--chip NAMES]",
		Short: "Measure prefill and decode speed (one prefill of a synthetic prompt, then greedy decode steps)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runBench(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "checkpoint directory")
	f.StringVar(&o.backend, "backend", defaultBackend(), backendHelp)
	f.IntVar(&o.ctx, "ctx", 128, "prompt length (context at the start of decode)")
	f.IntVar(&o.steps, "decode-steps", 64, "measured greedy decode steps")
	f.BoolVar(&o.warmup, "warmup", true, "run an exact-shape prefill and one decode step first")
	f.StringVar(&o.output, "output", "text", "text or json")
	f.BoolVar(&o.plan, "plan", false, "print the static decode plan's per-token cost for the production 35B-A3B config at context --ctx (no model needed)")
	f.BoolVar(&o.demo, "demo", false, "use the built-in demo model (random weights, real tokenizer and template)")
	f.StringVar(&o.trace, "agent-trace", "", "replay this multi-turn agent conversation (testdata/agent/trace.json) through the server and report each turn")
	f.IntVar(&o.traceTokens, "max-tokens", 16, "with --agent-trace: tokens generated per turn (greedy)")
	f.IntVar(&o.cacheMB, "cache-mb", 4096, "with --agent-trace: prefix-cache budget in MiB (0: no cache)")
	f.IntVar(&o.kvBits, "kv-bits", 16, kvBitsHelp+"; with --plan, the format modelled")
	f.IntVar(&o.prefillChunk, "prefill-chunk", -1, prefillChunkHelp)
	f.Var(&o.prefillRoute, "prefill-route", prefillRouteHelp+" (the --plan models report every chip's route)")
	addProfileFlags(f, &o.profile)
	f.IntVar(&o.batch, "batch", 0, fmt.Sprintf("with --plan: model one decode step over this many sequences at once (1 to %d, continuous batching) at --ctx each: its bytes, and aggregate tok/s per chip against one sequence's (%s)", decode.MaxRows, batchModelHelp))
	f.StringVar(&o.drafts, "drafts", runner.DraftsAuto, draftsHelp+". Given with --agent-trace (alone: auto): replay the trace's recorded replies teacher-forced through the suffix drafter and the cost gate, and print tokens per step and the modeled speed-up over plain decoding per turn and chip (--chip; no weights: the tokenizer and template of --model, else the built-in ones). With --concurrent: also run the requests with --drafts off, and compare")
	f.Lookup("drafts").NoOptDefVal = runner.DraftsAuto
	f.IntVar(&o.agents, "agents", 1, "with --agent-trace: replay this many copies of the trace at once, each 250 ms after the one before")
	f.IntVar(&o.concurrent, "concurrent", 0, "send this many greedy requests at once through the engine loop (each first alone, the baseline): aggregate and per-request tok/s, time to first token, the longest gap between two tokens of a request, and whether each equals its solo run")
	f.StringVar(&o.image, "image", "", "measure one image (PNG, JPEG, GIF, WebP): its decoding and preprocessing, the vision tower, and the time to the first token of a prompt holding it; with --plan, an image size WxH: model the production vision tower on it per chip")
	f.IntVar(&o.prefill, "prefill", 0, "with --plan: model a prefill chunk of this many tokens after --ctx cached positions instead of a decode token ("+prefillModelHelp+"); with --profile: also time one such chunk")
	return cmd
}

// benchPrompt is the anchor's synthetic prompt: token i = ((i·2654435761) mod 2^32) mod vocab.
func benchPrompt(n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = int(uint64(uint32(uint64(i)*2654435761)) % uint64(vocab))
	}
	return ids
}

func runBench(cmd *cobra.Command, o benchOptions) error {
	if o.ctx < 1 && !(o.plan && o.prefill > 0 && o.ctx == 0) || o.steps < 1 { // a prefill chunk may follow nothing
		return fmt.Errorf("--ctx and --decode-steps must be at least 1 (got %d, %d)", o.ctx, o.steps)
	}
	if o.output != "json" && o.output != "text" {
		return fmt.Errorf("--output %q: expected json or text", o.output)
	}
	if err := checkBatch(cmd.Flags().Changed("batch"), o); err != nil {
		return err
	}
	if err := runner.CheckDrafts(o.drafts); err != nil {
		return fmt.Errorf("--%v", err)
	}
	if cmd.Flags().Changed("drafts") && o.trace != "" {
		return runBenchDrafts(cmd, o)
	}
	if o.profile.on {
		return runBenchProfile(cmd, o)
	}
	if o.plan {
		if o.kvBits != 16 && o.kvBits != 8 {
			return fmt.Errorf("--kv-bits %d: expected 16 or 8", o.kvBits)
		}
		return runBenchPlan(cmd, o)
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return err
	}
	if err := checkPrefillChunk(o.prefillChunk); err != nil {
		return err
	}
	if err := checkPrefillRoute(o.prefillRoute, o.backend); err != nil {
		return err
	}
	if err := o.useDemo(); err != nil {
		return err
	}
	if o.concurrent > 0 {
		return runBenchConcurrent(cmd, o)
	}
	if o.trace != "" {
		return runBenchTrace(cmd, o)
	}
	if o.image != "" {
		return runBenchImage(cmd, o)
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{kvBits: o.kvBits, prefillChunk: o.prefillChunk, prefillRoute: o.prefillRoute})
	if err != nil {
		return err
	}
	defer closeBackend()
	if n := b.Describe().Context; n > 0 && o.ctx+o.steps > n {
		return fmt.Errorf("--ctx %d + %d steps exceed the context of %d", o.ctx, o.steps, n)
	}
	prompt := benchPrompt(o.ctx, cfg.VocabSize)
	r := runner.New(b, runner.Options{PrefillSlice: o.ctx, CheckpointEvery: -1, Hold: mtl.BeginActivity, Drafts: runner.DraftOptions{Mode: o.drafts}})
	greedy := func(n int) (runner.Result, error) { // no cache: every run prefills the whole prompt
		return r.Generate(cmd.Context(), runner.Request{Prompt: prompt, MaxTokens: n, NoCache: true}, func(runner.Token) (bool, error) { return false, nil })
	}
	if o.warmup {
		if _, err := greedy(2); err != nil {
			return err
		}
	}
	// One prefill (until the first token is chosen), then exactly `steps` measured decode steps.
	res, err := greedy(o.steps + 1)
	if err != nil {
		return err
	}
	h := fnv.New64a()
	for _, id := range res.Tokens[1:] {
		h.Write([]byte(strconv.Itoa(id) + ","))
	}
	out := benchOutput{
		SchemaVersion: 1, Backend: o.backend, Context: o.ctx,
		Prefill:  benchPhase{Tokens: o.ctx, Seconds: res.Prefill.Seconds(), TokS: rate(o.ctx, res.Prefill.Seconds())},
		Decode:   benchPhase{Tokens: o.steps, Seconds: res.Decode.Seconds(), TokS: rate(o.steps, res.Decode.Seconds())},
		TokenIDs: res.Tokens[1:],
		Digest:   fmt.Sprintf("%016x", h.Sum64()),
	}
	out.PrefillChunks = b.Describe().PrefillChunks
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "backend %s  context %d  prefill chunks %v\nprefill %d tokens  %.3f s  %.2f tok/s\ndecode  %d steps   %.3f s  %.2f tok/s\n",
		out.Backend, out.Context, out.PrefillChunks, out.Prefill.Tokens, out.Prefill.Seconds, out.Prefill.TokS, out.Decode.Tokens, out.Decode.Seconds, out.Decode.TokS)
	return err
}

// planOutput is `lily bench --plan --output json`: the decode plan's modelled cost per token.
type planOutput struct {
	Context           int     `json:"context"`
	Dispatches        int     `json:"dispatches_per_token"`
	Barriers          int     `json:"barriers_per_token"`
	Bytes             int64   `json:"bytes_per_token"`
	IdealBytes        int64   `json:"ideal_bytes_per_token"`
	BytesRatioToIdeal float64 `json:"bytes_ratio_to_ideal"`
	// PromptToken is what a prompt token before the last costs while prefill runs the decode
	// step token by token: the layers only (decode.ModePrefill), no LM head or selection.
	PromptToken struct {
		Dispatches int   `json:"dispatches"`
		Bytes      int64 `json:"bytes"`
	} `json:"prompt_token"`
	Memory struct {
		decode.Memory
		Snapshot int64 `json:"snapshot_bytes"` // a prefix-cache snapshot at the context
		// Vision is the vision tower's (at lily serve's default --image-max-pixels), VisionBytes
		// what the sizing sets aside for it (gpu.Sizing.VisionBytes) where it is loaded.
		Vision      vit.Memory `json:"vision"`
		VisionBytes int64      `json:"vision_bytes"`
	} `json:"memory"`
	// ContextByMacGB is the context lily serve would hold on a Mac of each memory size, from the
	// estimated working set (decode.MacWorkingSet), with that Mac's serving defaults
	// (gpu.DefaultsFor) where --kv-bits and --prefill-chunk are not given; 0: the weights do not
	// fit.
	ContextByMacGB map[string]int `json:"context_by_mac_gb"`
	// PrefillChunkByMacGB is the largest prefill chunk lily serve would run with there (what
	// --prefill-chunk gives, else the Mac's default) and KVBitsByMacGB its KV cache format.
	PrefillChunkByMacGB map[string]int `json:"prefill_chunk_by_mac_gb"`
	KVBitsByMacGB       map[string]int `json:"kv_bits_by_mac_gb"`
	// ParallelByMacGB is how many sequences run at once there (decode.Memory.Parallel at that
	// context: each can hold min(context, 32,768) positions at the same time, one alone the
	// whole context; 0: the weights do not fit).
	ParallelByMacGB map[string]int `json:"parallel_by_mac_gb"`
	// VisionByMacGB is whether lily serve's --vision auto keeps the vision tower there (and so
	// counts its memory in the numbers above): not on 24 GB, where it would take the context.
	VisionByMacGB map[string]bool `json:"vision_by_mac_gb"`
	// ContextByMacGBRaised is the context on the Macs whose GPU may wire only about two thirds
	// of their memory by default, once iogpu.wired_limit_mb is raised to RaisedWiredLimitMB
	// (wiredlimit.SuggestedMB: all but 4 GiB, left to macOS), and the sequences run at once there.
	ContextByMacGBRaised  map[string]int `json:"context_by_mac_gb_raised"`
	ParallelByMacGBRaised map[string]int `json:"parallel_by_mac_gb_raised"`
	RaisedWiredLimitMB    map[string]int `json:"raised_wired_limit_mb"`
}

// macSizes are the memory sizes of Apple silicon Macs that context_by_mac_gb reports, and
// raisedMacSizes those that context_by_mac_gb_raised reports.
var (
	macSizes       = []int{24, 32, 36, 48, 64, 128}
	raisedMacSizes = []int{24, 32}
)

// runBenchPlan builds the production model's decode step from shapes only (KV caches sized for
// ctx+1 positions, the traffic modelled with ctx tokens already cached) and prints plan.Stats
// against plan.IdealBytes.
func runBenchPlan(cmd *cobra.Command, o benchOptions) error {
	if o.model != "" {
		return fmt.Errorf("--plan models the production config from shapes only: drop --model")
	}
	if o.prefill < 0 {
		return fmt.Errorf("--prefill %d: expected a positive number of tokens", o.prefill)
	}
	if o.prefill > 0 {
		return runBenchPrefillPlan(cmd, o)
	}
	if o.image != "" {
		return runBenchPlanImage(cmd, o)
	}
	if o.batch > 0 {
		return runBenchBatchPlan(cmd, o)
	}
	c := config.Production()
	step, err := decode.Build(c, decode.Options{MaxCtx: o.ctx + 1, TrafficCtx: o.ctx, KVBits: o.kvBits})
	if err != nil {
		return err
	}
	st := step.Plan.Stats(decode.ModeSample) // what a sampled chat request runs per token
	ideal := plan.IdealBytes(c, o.ctx, o.kvBits).Total()
	out := planOutput{
		Context: o.ctx, Dispatches: st.Dispatches, Barriers: st.Barriers, Bytes: st.Bytes, IdealBytes: ideal,
		BytesRatioToIdeal: math.Round(float64(st.Bytes)/float64(ideal)*1e4) / 1e4,
		ContextByMacGB:    map[string]int{}, PrefillChunkByMacGB: map[string]int{}, KVBitsByMacGB: map[string]int{}, ParallelByMacGB: map[string]int{}, VisionByMacGB: map[string]bool{},
		ContextByMacGBRaised: map[string]int{}, ParallelByMacGBRaised: map[string]int{}, RaisedWiredLimitMB: map[string]int{},
	}
	pre := step.Plan.Stats(decode.ModePrefill)
	out.PromptToken.Dispatches, out.PromptToken.Bytes = pre.Dispatches, pre.Bytes
	full, err := servedSizing(0, 0, o.kvBits, o.prefillChunk, 0, gpu.Device{}) // no working-set limit, the tower loaded
	if err != nil {
		return err
	}
	out.Memory.Memory, out.Memory.Vision, out.Memory.VisionBytes = full.Memory, full.Vision, full.VisionBytes()
	out.Memory.Snapshot = out.Memory.Memory.Snapshot(o.ctx)
	// onMac is lily serve's sizing on a Mac of gb GB in workingSet bytes, with its serving
	// defaults where the flags are not given (and its KV format).
	onMac := func(gb int, workingSet int64) (served, int) {
		kvBits, prefillChunk := o.kvBits, o.prefillChunk
		applyMemoryDefaults(cmd.Flags(), "metal", int64(gb)<<30, &kvBits, &prefillChunk, nil)
		s, _ := servedSizing(workingSet, int64(gb)<<30, kvBits, prefillChunk, 0, gpu.Device{}) // 0 positions and sequences where the weights do not fit
		return s, kvBits
	}
	for _, gb := range macSizes {
		k := strconv.Itoa(gb)
		s, kvBits := onMac(gb, decode.MacWorkingSet(gb))
		out.ContextByMacGB[k], out.PrefillChunkByMacGB[k], out.KVBitsByMacGB[k], out.ParallelByMacGB[k] = s.Context, s.Chunk(), kvBits, s.Parallel
		out.VisionByMacGB[k] = s.VisionOff == ""
	}
	for _, gb := range raisedMacSizes {
		mb := wiredlimit.SuggestedMB(uint64(gb) << 30)
		k := strconv.Itoa(gb)
		out.RaisedWiredLimitMB[k] = int(mb)
		s, _ := onMac(gb, int64(mb)<<20)
		out.ContextByMacGBRaised[k], out.ParallelByMacGBRaised[k] = s.Context, s.Parallel
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	w := cmd.OutOrStdout()
	m := out.Memory
	fmt.Fprintf(w, "decode plan (Qwen3.6-35B-A3B, %d-bit KV) at context %d\ndispatches %d  barriers %d\nbytes %d  ideal %d  ratio %.4f\nprompt token (layers only): dispatches %d  bytes %d\n",
		o.kvBits, out.Context, out.Dispatches, out.Barriers, out.Bytes, out.IdealBytes, out.BytesRatioToIdeal, out.PromptToken.Dispatches, out.PromptToken.Bytes)
	fmt.Fprintf(w, "memory: weights %d, KV %d per position, state %d, scratch %d, snapshot at %d positions %d\nvision tower: %d (weights %d, activations for %d patches %d)\ncontext by Mac memory:",
		m.Weights, m.KVPerPosition, m.State, m.Scratch, o.ctx, m.Snapshot, m.VisionBytes, m.Vision.Weights, m.Vision.Patches, m.Vision.Activations)
	for _, gb := range macSizes {
		fmt.Fprintf(w, " %d GB: %d", gb, out.ContextByMacGB[strconv.Itoa(gb)])
	}
	fmt.Fprint(w, "\nlargest prefill chunk by Mac memory:")
	for _, gb := range macSizes {
		fmt.Fprintf(w, " %d GB: %d", gb, out.PrefillChunkByMacGB[strconv.Itoa(gb)])
	}
	fmt.Fprint(w, "\nKV bits by Mac memory:")
	for _, gb := range macSizes {
		fmt.Fprintf(w, " %d GB: %d", gb, out.KVBitsByMacGB[strconv.Itoa(gb)])
	}
	fmt.Fprint(w, "\nparallel sequences by Mac memory:")
	for _, gb := range macSizes {
		fmt.Fprintf(w, " %d GB: %d", gb, out.ParallelByMacGB[strconv.Itoa(gb)])
	}
	fmt.Fprint(w, "\nvision tower by Mac memory (--vision auto):")
	for _, gb := range macSizes {
		fmt.Fprintf(w, " %d GB: %s", gb, map[bool]string{true: "on", false: "off"}[out.VisionByMacGB[strconv.Itoa(gb)]])
	}
	fmt.Fprint(w, "\ncontext by Mac memory after raising iogpu.wired_limit_mb:")
	for _, gb := range raisedMacSizes {
		k := strconv.Itoa(gb)
		fmt.Fprintf(w, " %d GB: %d (%d MiB, %d parallel)", gb, out.ContextByMacGBRaised[k], out.RaisedWiredLimitMB[k], out.ParallelByMacGBRaised[k])
	}
	_, err = fmt.Fprintln(w)
	return err
}

// prefillChips are the chips the prefill and batch models report, from the one chip table
// (plan.Chips, with its sources): the Max of each generation, and M5 Pro, the neural
// accelerators' middle tier.
var prefillChips = func() []plan.Chip {
	var out []plan.Chip
	for _, c := range plan.Chips {
		if strings.HasSuffix(c.Name, " Max") || c.Name == "M5 Pro" {
			out = append(out, c)
		}
	}
	return out
}()

// prefillModelHelp is --prefill's model, with prefillChips' figures and this build's tensor-op
// kernels.
var prefillModelHelp = func() string {
	var chips []string
	for _, c := range prefillChips {
		tensor := ""
		if c.HasTensorOps() {
			tensor = fmt.Sprintf(" (tensor ops %.1f, an estimate)", c.TensorFLOPs/1e12)
		}
		chips = append(chips, fmt.Sprintf("%s %.0f GB/s %.3g TFLOP/s%s", c.Name, c.Bandwidth/1e9, c.FLOPs/1e12, tensor))
	}
	kernels := "none in this build yet"
	if k := decode.TensorKernels(); len(k) > 0 {
		kernels = strings.Join(k, ", ")
	}
	return "modeled tok/s = chunk / max(bytes / bandwidth, ALU FLOPs / ALU peak + tensor-op FLOPs / tensor-op peak) per chip, at 100% of each peak, on the chip's route: tensor where it has neural accelerators and the plan has tensor-op kernels (" +
		kernels + "), else simdgroup: " + strings.Join(chips, ", ") + "; routing taken as uniform"
}()

// prefillPlanOutput is `lily bench --plan --prefill M --output json`.
type prefillPlanOutput struct {
	Prefill struct {
		Chunk       int                `json:"chunk"`
		Context     int                `json:"context"`
		Dispatches  int                `json:"dispatches"`
		Barriers    int                `json:"barriers"`
		FLOPs       float64            `json:"flops"`
		IdealFLOPs  float64            `json:"ideal_flops"`
		Bytes       int64              `json:"bytes"`
		IdealBytes  int64              `json:"ideal_bytes"`
		ModeledTokS map[string]float64 `json:"modeled_tok_s"`
		// Route is the route each chip's figure takes (prefillRoute) and PeakTFLOPs that route's
		// peak matrix throughput there, in TFLOP/s.
		Route      map[string]string  `json:"route"`
		PeakTFLOPs map[string]float64 `json:"peak_tflops"`
		BytesRatio float64            `json:"bytes_ratio_to_ideal"`
		FLOPsRatio float64            `json:"flops_ratio_to_ideal"`
		// TensorFallbacks are the tensor route's dispatches that keep their simdgroup form (a
		// shape their tensor form cannot run), by kernel and why; none at production.
		TensorFallbacks []string `json:"tensor_fallbacks,omitempty"`
	} `json:"prefill"`
}

// runBenchPrefillPlan prints decode.PrefillModel for a chunk of --prefill tokens after --ctx,
// each chip's figure on its route. The other figures are the simdgroup route's.
func runBenchPrefillPlan(cmd *cobra.Command, o benchOptions) error {
	c := config.Production()
	p, err := decode.PrefillModel(c, o.prefill, o.ctx, o.kvBits)
	if err != nil {
		return err
	}
	t, err := decode.PrefillRouteModel(c, o.prefill, o.ctx, o.kvBits, plan.Tensor)
	if err != nil {
		return err
	}
	var out prefillPlanOutput
	q := &out.Prefill
	q.Chunk, q.Context, q.Dispatches, q.Barriers = p.Chunk, p.Context, p.Dispatches, p.Barriers
	q.FLOPs, q.IdealFLOPs, q.Bytes, q.IdealBytes = p.FLOPs, p.IdealFLOPs, p.Bytes, p.IdealBytes
	q.BytesRatio = math.Round(float64(p.Bytes)/float64(p.IdealBytes)*1e4) / 1e4
	q.FLOPsRatio = math.Round(p.FLOPs/p.IdealFLOPs*1e4) / 1e4
	q.ModeledTokS, q.Route, q.PeakTFLOPs = map[string]float64{}, map[string]string{}, map[string]float64{}
	q.TensorFallbacks = t.Fallbacks
	for _, chip := range prefillChips {
		cost := prefillRoute(chip, p, t)
		tps, err := cost.TokS(chip)
		if err != nil {
			return err
		}
		q.ModeledTokS[chip.Name] = math.Round(tps*10) / 10
		q.Route[chip.Name] = cost.Route.String()
		q.PeakTFLOPs[chip.Name] = math.Round(chip.Peak(cost.Route)/1e11) / 10
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "prefill chunk of %d tokens after %d cached (Qwen3.6-35B-A3B, %d-bit KV)\ndispatches %d  barriers %d\nFLOPs %.4g  ideal %.4g  ratio %.4f\nbytes %d  ideal %d  ratio %.4f\nmodeled tok/s (route, peak TFLOP/s):",
		q.Chunk, q.Context, o.kvBits, q.Dispatches, q.Barriers, q.FLOPs, q.IdealFLOPs, q.FLOPsRatio, q.Bytes, q.IdealBytes, q.BytesRatio)
	for _, chip := range prefillChips {
		fmt.Fprintf(w, " %s %.0f (%s, %.3g)", chip.Name, q.ModeledTokS[chip.Name], q.Route[chip.Name], q.PeakTFLOPs[chip.Name])
	}
	fmt.Fprintln(w)
	for _, f := range q.TensorFallbacks {
		fmt.Fprintf(w, "tensor route keeps the simdgroup form: %s\n", f)
	}
	return nil
}

// prefillRoute is the chunk's cost on the route chip takes: the tensor route's (tensor) where the
// chip has neural accelerators and that plan puts FLOPs on them, else the simdgroup route's
// (simd), so no chip is said to take a route that would run no tensor op.
func prefillRoute(chip plan.Chip, simd, tensor decode.PrefillCost) decode.PrefillCost {
	if chip.HasTensorOps() && tensor.TensorFLOPs > 0 {
		return tensor
	}
	return simd
}

// checkBatch rejects --batch (changed: given) without --plan, beside --prefill, or outside 1 to
// decode.MaxRows.
func checkBatch(changed bool, o benchOptions) error {
	switch {
	case !changed:
		return nil
	case !o.plan:
		return errors.New("--batch models a decode step over several sequences: it needs --plan")
	case o.prefill > 0:
		return errors.New("--batch and --prefill are exclusive: a batched decode step or a prefill chunk")
	case o.batch < 1 || o.batch > decode.MaxRows:
		return fmt.Errorf("--batch %d: expected 1 to %d sequences (the rows a batched decode step takes)", o.batch, decode.MaxRows)
	}
	return nil
}

const batchModelHelp = "the prefill model's time per chip on the simdgroup route, max(bytes / bandwidth, FLOPs / peak simdgroup-matrix throughput); weights read once per step, the routed experts of the rows' union under uniform routing, each sequence's KV, state and activations once per sequence"

// batchPlanOutput is `lily bench --plan --batch B --output json`.
type batchPlanOutput struct {
	Batch struct {
		Sequences  int `json:"sequences"`
		Context    int `json:"context"`
		Dispatches int `json:"dispatches"`
		Barriers   int `json:"barriers"`
		// ExpertsPerLayer is the routed experts a MoE layer reads for the step (decode.UnionExperts).
		ExpertsPerLayer float64 `json:"experts_per_layer"`
		BytesPerStep    int64   `json:"bytes_per_step"`
		BytesPerToken   int64   `json:"bytes_per_token"`
		// The step's bytes by part (decode.BatchCost): weights read once, the routed experts,
		// every sequence's own traffic.
		SharedWeightBytes int64              `json:"shared_weight_bytes"`
		RoutedExpertBytes int64              `json:"routed_expert_bytes"`
		PerSequenceBytes  int64              `json:"per_sequence_bytes"`
		ModeledTokS       map[string]float64 `json:"modeled_tok_s"`       // aggregate over the sequences
		SingleStreamTokS  map[string]float64 `json:"single_stream_tok_s"` // one sequence's step
		Speedup           map[string]float64 `json:"speedup"`             // aggregate / single stream
	} `json:"batch"`
}

// runBenchBatchPlan prints decode.BatchModel for --batch sequences at --ctx against one.
func runBenchBatchPlan(cmd *cobra.Command, o benchOptions) error {
	c := config.Production()
	one, err := decode.BatchModel(c, 1, o.ctx, o.kvBits)
	if err != nil {
		return err
	}
	b, err := decode.BatchModel(c, o.batch, o.ctx, o.kvBits)
	if err != nil {
		return err
	}
	var out batchPlanOutput
	q := &out.Batch
	q.Sequences, q.Context, q.Dispatches, q.Barriers = b.Rows, b.Context, b.Dispatches, b.Barriers
	q.ExpertsPerLayer = math.Round(b.Experts*100) / 100
	q.BytesPerStep, q.BytesPerToken = b.Bytes, b.BytesPerToken()
	q.SharedWeightBytes, q.RoutedExpertBytes, q.PerSequenceBytes = b.Shared, b.Routed, b.PerRow/int64(b.Rows)
	q.ModeledTokS, q.SingleStreamTokS, q.Speedup = map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, chip := range prefillChips {
		q.ModeledTokS[chip.Name] = math.Round(b.TokS(chip)*10) / 10
		q.SingleStreamTokS[chip.Name] = math.Round(one.TokS(chip)*10) / 10
		q.Speedup[chip.Name] = math.Round(b.TokS(chip)/one.TokS(chip)*1000) / 1000
	}
	if o.output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "batched decode step: %d sequences at context %d (Qwen3.6-35B-A3B, %d-bit KV, uniform routing)\ndispatches %d  barriers %d  routed experts per MoE layer %.2f\n",
		q.Sequences, q.Context, o.kvBits, q.Dispatches, q.Barriers, q.ExpertsPerLayer)
	fmt.Fprintf(w, "bytes per step %d (shared weights %d, routed experts %d, per sequence %d)  per token %d\nmodeled tok/s, aggregate (one sequence, speedup):",
		q.BytesPerStep, q.SharedWeightBytes, q.RoutedExpertBytes, q.PerSequenceBytes, q.BytesPerToken)
	for _, chip := range prefillChips {
		fmt.Fprintf(w, " %s %.0f (%.0f, %.2f×)", chip.Name, q.ModeledTokS[chip.Name], q.SingleStreamTokS[chip.Name], q.Speedup[chip.Name])
	}
	_, err = fmt.Fprintln(w)
	return err
}

// useDemo points o at the demo model's checkpoint when --demo is given (alone).
func (o *benchOptions) useDemo() error {
	if !o.demo {
		return nil
	}
	if o.model != "" {
		return errors.New("--demo and --model are exclusive")
	}
	dir, err := demoDir()
	if err != nil {
		return fmt.Errorf("demo model: %w", err)
	}
	o.model = dir
	return nil
}
