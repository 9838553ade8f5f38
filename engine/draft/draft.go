// Package draft is speculative decoding's host side: drafters that propose the tokens a
// sequence is likely to generate next, their acceptance estimates, and the cost gate that
// decides how many of them each sequence verifies in a step. Verification itself is the
// engine loop's (engine/runner) on a backend's multi-row step: a drafted token is kept only if
// it equals the token plain decoding would have chosen there, so drafting never changes output.
package draft

// MaxRows is the most rows one step verifies over every sequence together (a sequence with K
// drafts takes K+1): the backends' multi-row step's limit.
const MaxRows = 8

// Drafter proposes continuations. One serves every sequence; Start gives each its own Stream.
type Drafter interface {
	// Name identifies the drafter in metrics ("suffix").
	Name() string
	// Start begins drafting for a sequence whose prompt is prompt (token ids).
	Start(prompt []int) Stream
}

// Stream drafts for one sequence.
type Stream interface {
	// Draft proposes up to max tokens to follow the sequence so far (none: no candidate).
	Draft(max int) Proposal
	// Commit appends tokens the sequence generated (accepted drafts and the token after them, or
	// plain decoding's), in order.
	Commit(tokens []int)
	// Feedback reports how many tokens of p (a proposal of this stream's, before the tokens
	// committed since) were accepted, for the drafter's acceptance estimates. p is the proposal
	// as verified: one whose tokens a gate cut to K before verifying them comes back with its
	// Tokens cut to those K, so that tokens never verified do not count as rejected.
	Feedback(p Proposal, accepted int)
	// Close ends the sequence (a drafter may keep its output for others to draw on).
	Close()
}

// Proposal is a draft: the tokens and, for each, the estimated probability that it is accepted
// given that the ones before it were (the gate's input; Accept[i] in [0, 1]).
type Proposal struct {
	Tokens []int
	Accept []float64
	// Bucket names the estimate's class (for a suffix drafter, the match length's bucket),
	// which Feedback updates.
	Bucket int
}

// Hidden is implemented by a Stream whose drafts are conditioned on the target model's hidden
// states (a learned block drafter such as DFlash2, which reads a few of the target's layers, or
// the model's own MTP head, which reads the last layer's output): the engine loop passes the
// rows of the layers it asks for, one per committed token, beside Commit.
type Hidden interface {
	// Layers are the target's layers whose outputs the stream reads (0-based, the hidden size
	// each); -1 is the final norm's output.
	Layers() []int
	// CommitHidden gives the rows of Layers() for the tokens of the last Commit: rows[t][l].
	CommitHidden(rows [][][]float32)
}
