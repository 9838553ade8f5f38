// Package steer shapes a generation token by token (runner.Steer): a thinking budget that ends
// the model's reasoning after so many tokens, a grammar the answer must follow (constrained
// decoding), and a chain that runs several steers together.
package steer

// Budget ends reasoning after Max tokens by forcing the close sequence (the tokens of
// "\n</think>\n\n", as Qwen closes its reasoning itself). It is active only while the model
// reasons: from the start when the prompt opened the reasoning block, until the model's own
// end-of-reasoning token (End) or the forced close.
type Budget struct {
	Max      int   // reasoning tokens allowed (> 0)
	End      int   // the </think> token id
	Close    []int // the forced close sequence, which contains End
	thinking bool
	used     int
	forcing  int // position in Close while forcing (-1: not forcing)
}

// NewBudget steers a generation whose prompt ends inside the reasoning block when thinking.
func NewBudget(max, end int, close []int, thinking bool) *Budget {
	return &Budget{Max: max, End: end, Close: close, thinking: thinking, forcing: -1}
}

// Next forces the close sequence once the budget is spent.
func (b *Budget) Next() (int, bool, []uint64) {
	if b.thinking && b.forcing < 0 && b.used >= b.Max {
		b.forcing = 0
	}
	if b.forcing >= 0 && b.forcing < len(b.Close) {
		return b.Close[b.forcing], true, nil
	}
	return 0, false, nil
}

// Accept counts reasoning tokens and follows the close.
func (b *Budget) Accept(id int) error {
	switch {
	case b.forcing >= 0 && b.forcing < len(b.Close):
		b.forcing++
	case b.thinking:
		b.used++
	}
	if id == b.End {
		b.thinking = false
	}
	return nil
}

// Thinking reports whether the generation is still inside the reasoning block.
func (b *Budget) Thinking() bool { return b.thinking }

// Step is what runner.Steer asks of each steer in a Chain.
type Step interface {
	Next() (forced int, ok bool, allowed []uint64)
	Accept(id int) error
}

// Chain runs steers together: the first that forces a token wins, else the first that
// restricts the choice; every steer is told every token.
type Chain []Step

func (c Chain) Next() (int, bool, []uint64) {
	var allowed []uint64
	for _, s := range c {
		id, ok, a := s.Next()
		if ok {
			return id, true, nil
		}
		if allowed == nil {
			allowed = a
		}
	}
	return 0, false, allowed
}

func (c Chain) Accept(id int) error {
	for _, s := range c {
		if err := s.Accept(id); err != nil {
			return err
		}
	}
	return nil
}
