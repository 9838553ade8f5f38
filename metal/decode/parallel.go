package decode

import "fmt"

// ParallelContext is the positions every one of several sequences running at once can hold at
// the same time: two coding agents' sessions (a system prompt and tools of 13,000 to 20,000
// tokens, then the conversation) side by side.
const ParallelContext = 32768

// MaxParallel is the most sequences that run at once: the rows of a multi-row step.
const MaxParallel = MaxRows

// SessionsPages is the KV pool pages (of pageSize positions) that n sequences running at once,
// each of at most ctx positions, need. The rule: every one of them can hold min(ctx,
// ParallelContext) positions at the same time, and one alone its whole ctx (the pool is shared,
// a sequence takes pages as it grows), each with its spare page (Options.Pages). One sequence
// needs what a session has always had: ctx's pages and the spare.
func SessionsPages(ctx, n, pageSize int) int {
	pages := func(positions int) int { return (positions+pageSize-1)/pageSize + 1 }
	return max(pages(ctx), n*pages(min(ctx, ParallelContext)))
}

// fitsParallel reports whether n sequences of ctx positions (SessionsPages), their states and
// rows of scratch fit beside the weights in workingSet bytes.
func (m Memory) fitsParallel(ctx, n int, workingSet int64) bool {
	return ctx > 0 && SessionsPages(ctx, n, m.PageSize) <= m.PagesBeside(workingSet, m.PageSize, n)
}

// Parallel is how many sequences can run at once (continuous batching) with a context of ctx
// positions, the one Context chose, in workingSet bytes: the most, up to MaxParallel, whose KV
// pages by SessionsPages' rule, DeltaNet and conv states and rows of scratch fit beside the
// weights (PagesBeside); 0 when not even one does; MaxParallel when no working set is known (0,
// the emulator). The context stays what one session gets, so where it fills the working set
// (Macs up to 32 GB) one sequence runs, and why says that a lower --ctx leaves room for more.
func (m Memory) Parallel(ctx int, workingSet int64) (int, string) {
	if workingSet <= 0 {
		return MaxParallel, "no GPU working-set limit known"
	}
	n := 0
	for n < MaxParallel && m.fitsParallel(ctx, n+1, workingSet) {
		n++
	}
	each := min(ctx, ParallelContext)
	var why string
	switch {
	case n == 0:
		return 0, fmt.Sprintf("not one session of %d positions fits beside %s of weights in this GPU's working set of %s", ctx, gib(m.Weights), gib(workingSet))
	case n == MaxParallel:
		return n, fmt.Sprintf("each can hold %d positions at once, one alone %d; %d is the most a batched step runs", each, ctx, MaxParallel)
	case n == 1:
		why = fmt.Sprintf("one session of %d positions fills this GPU's working set of %s beside %s of weights", ctx, gib(workingSet), gib(m.Weights))
	default:
		why = fmt.Sprintf("%d sessions of %d positions at once, one alone %d, fill this GPU's working set of %s beside %s of weights", n, each, ctx, gib(workingSet), gib(m.Weights))
	}
	if ctx > ParallelContext {
		// Not a count: a lower --ctx may also change the prefill chunk lily serve picks.
		if more, _ := m.Parallel(ParallelContext, workingSet); more > n {
			why += "; a lower --ctx leaves room for more"
		}
	}
	return n, why
}

// DefaultParallel is the sequences the default context leaves room for: a coding agent's main
// loop, its background requests and a subagent or an IDE's completion beside it.
const DefaultParallel = 4

// RoomForParallel is the context to serve when neither the context nor the sequences at once are
// asked for: ctx, the most one session can hold (Context), lowered by whole pages until as many
// sequences as an eighth less context allows (up to DefaultParallel; Parallel) fit. Where one
// session's context fills the working set (a 32 GB Mac) the other sequences' states and scratch
// take a few thousand positions; why says so ("" when ctx is kept).
func (m Memory) RoomForParallel(ctx int, workingSet int64) (int, string) {
	if workingSet <= 0 || ctx <= 0 {
		return ctx, ""
	}
	fits := func(pages int) int { n, _ := m.Parallel(pages*m.PageSize, workingSet); return n }
	lo, hi := (ctx-ctx/8+m.PageSize-1)/m.PageSize, ctx/m.PageSize // in pages
	now, _ := m.Parallel(ctx, workingSet)
	want := min(fits(lo), DefaultParallel)
	if lo > hi || want <= now {
		return ctx, ""
	}
	for lo < hi { // the most pages at which want fit: lo does, hi+1 does not
		mid := (lo + hi + 1) / 2
		if fits(mid) >= want {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	got := lo * m.PageSize
	return got, fmt.Sprintf("%d positions rather than %d leave room for %d sequences at once (--parallel) beside the weights", got, ctx, want)
}
