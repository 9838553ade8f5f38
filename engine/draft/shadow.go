package draft

import "slices"

// Shadow judges a proposal the gate did not verify against the tokens the sequence then commits
// and reports the verdict to the stream (Feedback) as if it had been verified: a drafter learns
// its acceptance from plain decoding at no cost, so the gate drafts on evidence, never on a
// drafter's prior alone (whose first, blind drafts could make a turn slower than plain
// decoding). One proposal is judged at a time; a sequence keeps one Shadow for its life.
type Shadow struct {
	p       Proposal
	matched int
	open    bool
}

// Offer starts judging p (a proposal the step does not verify) unless one is being judged.
func (sh *Shadow) Offer(p Proposal) {
	if sh.open || len(p.Tokens) == 0 {
		return
	}
	sh.p = Proposal{Tokens: slices.Clone(p.Tokens), Accept: slices.Clone(p.Accept), Bucket: p.Bucket}
	sh.matched, sh.open = 0, true
}

// Commit judges the proposal being judged against tokens, the next the sequence committed, and
// once the verdict is known (a token differs, or every proposed token matched) gives it to s.
func (sh *Shadow) Commit(s Stream, tokens []int) {
	for _, t := range tokens {
		if !sh.open {
			return
		}
		if t != sh.p.Tokens[sh.matched] {
			sh.decide(s)
			return
		}
		if sh.matched++; sh.matched == len(sh.p.Tokens) {
			sh.decide(s)
		}
	}
}

func (sh *Shadow) decide(s Stream) {
	s.Feedback(sh.p, sh.matched)
	sh.open, sh.p = false, Proposal{}
}
