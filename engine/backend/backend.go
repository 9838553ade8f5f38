// Package backend defines what every executor (CPU reference, emulated Metal, Metal) offers the
// rest of Lily: a description of what it was sized for, sessions that consume tokens and return
// logits, a step over several sessions' rows at once (drafts verified among them), generation
// that stays on the device for one or several rows, snapshots of a session's state (the prefix
// cache) restored later, and device memory given back.
package backend

import (
	"context"
	"errors"
	"slices"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/engine/vision"
)

// Backend runs one loaded model.
type Backend interface {
	Name() string
	Config() *config.Config
	NewSession() Session
	// Describe is what the backend was sized for; it does not change once built.
	Describe() Description
	// StepRows runs several sessions' rows, in one step where it can (the weights read once for
	// all; else row after row, StepEach). Each row's logits must not depend on the other rows
	// (batch invariance).
	StepRows(rows []Row) []RowResult
	// Batched is how many steps ran several rows at once, and the rows they ran.
	Batched() (steps, rows int64)
	// EncodeImage runs the vision tower over an image's patch rows: one row of the model's hidden
	// size per merged block, the embeddings that replace its pad tokens (Image.Embeds). An error
	// when Describe().Vision is off.
	EncodeImage(px *vision.Pixels) ([][]float32, error)
	// Fits says whether sequences reaching the given positions (prompt plus the most tokens each
	// may generate) can run at once, so the engine loop admits a sequence only when its memory is
	// sure to be there (a GPU's sessions share a fixed pool of KV pages).
	Fits(positions []int) bool
}

// Description is what a backend says of itself, the numbers the engine loop and the CLI size
// their own work by: read once, in one value, rather than probed for method by method.
type Description struct {
	Name string
	// Context is the positions a session holds; ContextWhy why it is below the model's ("": it
	// is the model's, as on the CPU reference).
	Context    int
	ContextWhy string
	// Parallel is how many sequences the backend's memory was sized to run at once, and why (0:
	// no limit of its own, as on the CPU reference).
	Parallel    int
	ParallelWhy string
	// PrefillChunks are the prompt tokens a batched prefill step takes, largest first (none:
	// prompts run token by token); the runner feeds prompts in multiples of the largest.
	PrefillChunks []int
	// PrefillSlice is the prompt tokens per engine-loop step that suit the device (0: no
	// preference).
	PrefillSlice int
	// PrefillRoute is the route the batched prefill takes ("tensor" or "simdgroup"; "": the
	// backend has none), and why.
	PrefillRoute, PrefillRouteWhy string
	// Vision says whether prompts may hold images (EncodeImage, ForwardImages); VisionWhy says
	// why not (images then become text placeholders).
	Vision    bool
	VisionWhy string
	// Rows is the most rows one step runs together, a sequence's next token and each of its
	// drafts one row each (0: no limit of its own); drafts past it are verified at plain steps'
	// cost. DraftCost prices the backend's steps for the drafting gate (engine/draft; nil: rows
	// cost alike, draft.LinearCost, and the gate does not draft), DraftCostWhy says from what.
	Rows         int
	DraftCost    draft.Cost
	DraftCostWhy string
}

// PrefillChunk is the largest batched prefill chunk (0: none).
func (d Description) PrefillChunk() int {
	if len(d.PrefillChunks) == 0 {
		return 0
	}
	return slices.Max(d.PrefillChunks)
}

// Session is one sequence's state on a backend.
type Session interface {
	// Forward feeds tokens at the next positions and returns a logits row for every token when
	// all is set, else for the last one.
	Forward(tokens []int, all bool) ([][]float32, error)
	// ForwardImages is Forward for a piece of prompt that holds images: their rows replace the
	// image-pad tokens' embeddings and those tokens take the images' rotary positions
	// (Positions); text after an image goes on at its shifted positions in later calls too.
	ForwardImages(tokens []int, images []Image, all bool) ([][]float32, error)
	// Pos is the number of tokens consumed.
	Pos() int
	// Save copies the state after Pos() tokens into a snapshot; the session goes on.
	Save() (Snapshot, error)
	// Close gives the session's memory back; the session is not used afterwards.
	Close()
}

// Snapshot is a saved sequence state: the recurrent layers' state and the attention layers' KV
// rows of the positions consumed, nothing more.
type Snapshot interface {
	Pos() int
	// Bytes is the memory the snapshot holds.
	Bytes() int64
	// Restore starts a new session that continues from the snapshot (which stays valid).
	Restore() (Session, error)
	Close()
}

// Persistent is a Backend whose snapshots can be written out and read back (the prefix cache's
// disk tier). The encoding is the backend's own, valid for the same model on the same backend.
type Persistent interface {
	EncodeSnapshot(s Snapshot) ([]byte, error)
	// DecodeSnapshot reads what EncodeSnapshot wrote for a snapshot of pos positions; data of any
	// other length is an error.
	DecodeSnapshot(data []byte, pos int) (Snapshot, error)
}

// Generator is a Backend that can run generations on its device: the tokens and the positions
// stay there, two steps are in flight, and the host reads a few bytes per token instead of a
// logits row. One row runs on its session alone; several run together, one multi-row step a token.
type Generator interface {
	// ContinueRows goes on with each row's generation from its Generated tokens, the tokens chosen
	// so far by sample.New(Params, Prompt) (steps 0 … len−1; the session has consumed all but the
	// last, which the host chose from its last logits row), choosing up to Max more with Params'
	// procedure (Params.Seed set; step k draws from (seed, k), so a generation paused and continued
	// chooses what it would have in one go, and a row's choices do not depend on the other rows)
	// and passing each to the row's OnToken (with its logprob and Params.TopLogprobs alternatives
	// when Params asks for logprobs). It ends when any row's OnToken stops or fails, a row's Max
	// or the end of its context comes, or ctx is done. Every token passed on, and the last of
	// Generated, is consumed (Pos grows by their number); it returns each row's logits after its
	// last token. ErrNotOnDevice: some row cannot run there (its settings, or rows that cannot
	// step together); nothing was consumed.
	ContinueRows(ctx context.Context, rows []GenRow) ([][]float32, error)
}

// GenRow is one sequence of ContinueRows.
type GenRow struct {
	Session           Session
	Params            sample.Params
	Prompt, Generated []int
	Max               int
	// OnToken sees each token chosen (nil: none does); stop=true or an error ends the run. Stop
	// ids are the caller's to check here.
	OnToken func(c sample.Choice) (stop bool, err error)
}

// Row is one session's part of a step: tokens it consumes at its next positions. A step's rows
// belong to distinct sessions.
type Row struct {
	Session Session
	Tokens  []int
	Images  []Image // the images among Tokens (At relative to Tokens; none: text)
	// Verify makes the row a verification (engine/draft): Tokens are the sequence's next token and
	// drafts after it, the result holds the logits after each (RowResult.Rows), and the session
	// (a Verifier) keeps them all only until its Keep says how many it keeps.
	Verify bool
}

// RowResult is what a step gives one row: the logits row after its last token, or why the row
// failed (the other rows are unaffected).
type RowResult struct {
	Logits []float32
	Rows   [][]float32 // a Verify row's logits after each of its tokens (Logits is the last)
	Err    error
}

// Verifier is a Session that verifies drafts: Verify consumes tokens at its next positions and
// returns the logits after each, every row exactly what consuming the tokens one at a time would
// give; Keep(n), 1 ≤ n ≤ len(tokens), then leaves the session as if it had consumed only the
// first n of them (its recurrent state that of those n, its position n past where they began).
// Keep must follow every Verify before the session steps again or is saved.
type Verifier interface {
	Verify(tokens []int) ([][]float32, error)
	Keep(n int) error
}

// ErrNoVerify is the answer for a Verify row whose session cannot verify drafts.
var ErrNoVerify = errors.New("backend: this session cannot verify drafts")

// StepEach runs rows one after another through each session's Forward (ForwardImages for a row
// holding images): a StepRows that is batch-invariant by construction (the CPU backend's, and a
// GPU's for rows it cannot batch). Text rows keep to Forward, so a session that wraps another
// (a test's logging session, say) sees text exactly as before images existed.
func StepEach(rows []Row) []RowResult {
	out := make([]RowResult, len(rows))
	for i, r := range rows {
		var logits [][]float32
		var err error
		switch v, ok := r.Session.(Verifier); {
		case r.Verify && !ok:
			err = ErrNoVerify
		case r.Verify:
			logits, err = v.Verify(r.Tokens)
			out[i].Rows = logits
		case len(r.Images) == 0:
			logits, err = r.Session.Forward(r.Tokens, false)
		default:
			logits, err = r.Session.ForwardImages(r.Tokens, r.Images, false)
		}
		if err == nil {
			out[i].Logits = logits[len(logits)-1]
		}
		out[i].Err = err
	}
	return out
}

// ErrNotOnDevice is ContinueRows' answer for rows the device does not run (sampling candidates
// beyond what its sampler sorts, more logprob alternatives than it reports, sessions that cannot
// share a step); the host then samples from the logits of a StepRows.
var ErrNotOnDevice = errors.New("backend: these sampling settings run on the host")
