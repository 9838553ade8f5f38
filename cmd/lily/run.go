package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
)

type runOptions struct {
	model, backend, promptIDs, prompt, output, logitsOut string
	promptLogitsOut                                      string
	chat                                                 bool
	maxTokens, topK, kvBits, prefillChunk                int
	temperature, topP, minP                              float32
	seed                                                 int64
	ignoreEOS                                            bool
	prefillRoute                                         gpu.RouteChoice
	images                                               []string // --image files, in prompt order
	drafts                                               string   // --drafts (runner.DraftOptions.Mode)
}

// runOutput is the stable JSON contract of `lily run --output json`.
type runOutput struct {
	TokenIDs          []int   `json:"token_ids"`
	PromptTokens      int     `json:"prompt_tokens"`
	CompletionTokens  int     `json:"completion_tokens"`
	FinishReason      string  `json:"finish_reason"`
	Backend           string  `json:"backend"`
	Text              *string `json:"text,omitempty"` // with --prompt: the generated text
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerS  float64 `json:"decode_tokens_per_s"`
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run --model DIR --prompt-ids 1,2,3 --max-tokens N",
		Short: "Generate token ids from prompt token ids (greedy, or seeded sampling)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runRun(cmd, o, cmd.Flags().Changed("seed"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "checkpoint directory (config.json + safetensors)")
	f.StringVar(&o.backend, "backend", defaultBackend(), backendHelp)
	f.StringVar(&o.promptIDs, "prompt-ids", "", "comma-separated prompt token ids")
	f.StringVar(&o.prompt, "prompt", "", "prompt text, tokenized with the checkpoint's tokenizer.json")
	f.BoolVar(&o.chat, "chat", false, "with --prompt: send it as a user message through the chat template")
	f.IntVar(&o.maxTokens, "max-tokens", 16, "tokens to generate")
	f.Float32Var(&o.temperature, "temperature", 0, "sampling temperature (0: greedy); the server's sampler, over every row of the LM head")
	f.Float32Var(&o.topP, "top-p", 0, "nucleus sampling: keep the most likely tokens up to this probability (0 or 1: off)")
	f.IntVar(&o.topK, "top-k", 0, "keep the k most likely tokens (0: off)")
	f.Float32Var(&o.minP, "min-p", 0, "drop tokens less likely than this fraction of the most likely one (0: off)")
	f.Int64Var(&o.seed, "seed", 0, "sampling seed (default: random); the same seed gives the same tokens on every backend")
	f.StringVar(&o.output, "output", "json", "json or text")
	f.StringVar(&o.logitsOut, "logits-out", "", "write each chosen token's logits row as little-endian float32")
	draftsFlag(f, &o.drafts)
	f.StringVar(&o.promptLogitsOut, "prompt-logits-out", "", "write the logits of every prompt position (a row of vocab_size little-endian float32 each), computed through the batched prefill on the GPU backends")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating after an end-of-sequence token")
	f.IntVar(&o.kvBits, "kv-bits", 16, kvBitsHelp)
	f.IntVar(&o.prefillChunk, "prefill-chunk", -1, prefillChunkHelp)
	f.Var(&o.prefillRoute, "prefill-route", prefillRouteHelp)
	f.StringArrayVar(&o.images, "image", nil, "an image file (PNG, JPEG, GIF, WebP) for the prompt, repeatable: with --prompt --chat each goes before the text; else each <|image_pad|> in --prompt-ids or --prompt is one image, in order; Lily expands each to its tokens (--prompt-logits-out then has a row per expanded position)")
	return cmd
}

func runRun(cmd *cobra.Command, o runOptions, seeded bool) error {
	params, err := o.check(seeded)
	if err != nil {
		return err
	}
	var prompt []int
	if o.promptIDs != "" {
		if prompt, err = parseIDs(o.promptIDs); err != nil {
			return err
		}
	}
	b, cfg, closeBackend, err := openBackend(o.backend, o.model, backendOptions{kvBits: o.kvBits, prefillChunk: o.prefillChunk, chunkLogits: o.promptLogitsOut != "", prefillRoute: o.prefillRoute})
	if err != nil {
		return err
	}
	defer closeBackend()
	var tok *tokenizer.Tokenizer
	if o.prompt != "" {
		if tok, prompt, err = textPrompt(o.model, o.prompt, o.chat, len(o.images)); err != nil {
			return err
		}
	}
	prompt, ims, err := runImages(cmd.Context(), o.model, cfg, b, prompt, o.images)
	if err != nil {
		return err
	}
	for _, id := range prompt {
		if id >= cfg.VocabSize {
			return fmt.Errorf("--prompt-ids: token id %d outside the vocabulary [0, %d)", id, cfg.VocabSize)
		}
	}
	var stop []int
	if !o.ignoreEOS {
		stop = cfg.EOSTokenIDs
	}
	if o.promptLogitsOut != "" {
		if err := writePromptLogits(b, prompt, ims, o.promptLogitsOut); err != nil {
			return err
		}
	}
	req := runner.Request{Prompt: prompt, Images: ims, MaxTokens: o.maxTokens, Sampling: params, StopIDs: stop, NoCache: true}
	res, err := runGenerate(cmd.Context(), runner.New(b, runner.Options{Context: b.Describe().Context, Hold: mtl.BeginActivity,
		Drafts: runner.DraftOptions{Mode: o.drafts}}), req, o.logitsOut)
	if err != nil {
		return err
	}
	out := runOutput{
		TokenIDs: res.Tokens, PromptTokens: len(prompt), CompletionTokens: len(res.Tokens),
		FinishReason: res.FinishReason, Backend: o.backend,
		PrefillTokensPerS: rate(len(prompt), res.Prefill.Seconds()),
		DecodeTokensPerS:  rate(len(res.Tokens)-1, res.Decode.Seconds()),
	}
	if tok != nil {
		text := tok.Decode(slices.DeleteFunc(slices.Clone(res.Tokens), func(id int) bool { return slices.Contains(stop, id) }))
		out.Text = &text
	}
	return out.write(cmd.OutOrStdout(), o.output)
}

// check checks the flags that need no checkpoint, and returns the sampling parameters they give.
func (o runOptions) check(seeded bool) (sample.Params, error) {
	params := sample.Params{Temperature: o.temperature, TopP: o.topP, TopK: o.topK, MinP: o.minP}
	if seeded {
		seed := uint64(o.seed)
		params.Seed = &seed
	}
	if err := params.Validate(); err != nil {
		return params, fmt.Errorf("sampling flags: %w", err)
	}
	if o.output != "json" && o.output != "text" {
		return params, fmt.Errorf("--output %q: expected json or text", o.output)
	}
	if o.maxTokens < 1 {
		return params, fmt.Errorf("--max-tokens %d: expected at least 1", o.maxTokens)
	}
	if err := runner.CheckDrafts(o.drafts); err != nil {
		return params, fmt.Errorf("--%v", err)
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return params, err
	}
	if err := checkPrefillChunk(o.prefillChunk); err != nil {
		return params, err
	}
	if err := checkPrefillRoute(o.prefillRoute, o.backend); err != nil {
		return params, err
	}
	if (o.prompt == "") == (o.promptIDs == "") {
		return params, fmt.Errorf("give exactly one of --prompt TEXT and --prompt-ids 1,2,3 (--prompt-ids is required without --prompt)")
	}
	if o.chat && o.prompt == "" {
		return params, fmt.Errorf("--chat needs --prompt")
	}
	return params, nil
}

// runGenerate runs req, with --logits-out's rows (logitsOut: "" for none) written as they come
// and put in place only when the generation succeeded.
func runGenerate(ctx context.Context, r *runner.Runner, req runner.Request, logitsOut string) (runner.Result, error) {
	var logits *logitsWriter
	if logitsOut != "" {
		var err error
		if logits, err = newLogitsWriter(logitsOut, "--logits-out"); err != nil {
			return runner.Result{}, err
		}
		defer logits.abort()
		req.OnLogits = func(_ int, row []float32) error { return logits.write(row) }
	}
	res, err := r.Generate(ctx, req, func(runner.Token) (bool, error) { return false, nil })
	if err != nil {
		return res, err
	}
	if logits != nil {
		if err := logits.commit(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// write prints the output as --output asks: the JSON, else the text (with --prompt) or the token ids.
func (out runOutput) write(w io.Writer, format string) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(out)
	}
	if out.Text != nil {
		_, err := fmt.Fprint(w, *out.Text)
		return err
	}
	ids := make([]string, len(out.TokenIDs))
	for i, id := range out.TokenIDs {
		ids[i] = strconv.Itoa(id)
	}
	_, err := fmt.Fprintln(w, strings.Join(ids, " "))
	return err
}

func rate(n int, seconds float64) float64 {
	if n <= 0 || seconds <= 0 {
		return 0
	}
	return math.Round(float64(n)/seconds*100) / 100
}

// textPrompt tokenizes text with the checkpoint's tokenizer, optionally as a chat turn whose
// user message holds images images before the text.
func textPrompt(dir, text string, asChat bool, images int) (*tokenizer.Tokenizer, []int, error) {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("--prompt needs the checkpoint's tokenizer: %w", err)
	}
	if asChat {
		tmpl, err := chat.Load(dir)
		if err != nil {
			return nil, nil, err
		}
		var content []map[string]string
		for range images {
			content = append(content, map[string]string{"type": "image"})
		}
		msgs, _ := json.Marshal([]map[string]any{{"role": "user", "content": append(content, map[string]string{"type": "text", "text": text})}})
		if text, err = tmpl.Render(chat.Request{Messages: msgs, AddGenerationPrompt: true}); err != nil {
			return nil, nil, err
		}
	}
	ids := tok.Encode(text)
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("--prompt is empty after tokenization")
	}
	return tok, ids, nil
}

func parseIDs(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	var ids []int
	for i, part := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--prompt-ids: item %d (%q) is not a token id", i+1, part)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// writePromptLogits writes the logits of every position of prompt, through a session of its own
// (on a GPU backend built with chunk logits: the batched prefill, the last chunk's worth of
// tokens through the decode step).
func writePromptLogits(b backend.Backend, prompt []int, ims []runner.Image, path string) error {
	w, err := newLogitsWriter(path, "--prompt-logits-out")
	if err != nil {
		return err
	}
	defer w.abort()
	s := b.NewSession()
	defer s.Close()
	var placed []backend.Image
	for _, im := range ims {
		placed = append(placed, im.Image)
	}
	rows, err := s.ForwardImages(prompt, placed, true)
	if err != nil {
		return fmt.Errorf("--prompt-logits-out: %w", err)
	}
	for _, row := range rows {
		if err := w.write(row); err != nil {
			return fmt.Errorf("--prompt-logits-out: %w", err)
		}
	}
	return w.commit()
}

// logitsWriter streams rows to a temp file and renames it into place only when generation succeeded.
type logitsWriter struct {
	path, flag string
	f          *os.File
	w          *bufio.Writer
	buf        []byte
}

func newLogitsWriter(path, flag string) (*logitsWriter, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return &logitsWriter{path: path, flag: flag, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (l *logitsWriter) write(row []float32) error {
	l.buf = l.buf[:0]
	for _, v := range row {
		l.buf = binary.LittleEndian.AppendUint32(l.buf, math.Float32bits(v))
	}
	_, err := l.w.Write(l.buf)
	return err
}

func (l *logitsWriter) commit() error {
	err := l.w.Flush()
	if err == nil {
		err = l.f.Sync()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(l.f.Name(), l.path)
	}
	if err != nil {
		os.Remove(l.f.Name())
		return fmt.Errorf("%s: %w", l.flag, err)
	}
	l.f = nil
	return nil
}

// abort removes the temp file unless commit succeeded.
func (l *logitsWriter) abort() {
	if l.f != nil {
		l.f.Close()
		os.Remove(l.f.Name())
	}
}
