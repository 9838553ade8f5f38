package cpu

import (
	"errors"
	"fmt"
)

// verifying is a Verify in progress: the recurrent state before it and the tokens it consumed.
type verifying struct {
	pos       int
	conv, ssm [][]float32 // copies of the state's, per layer (nil for attention layers)
	tokens    []int
	kvLen     []int // each attention layer's cached floats before it
}

// Verify consumes tokens (a sequence's next token and drafts after it) and returns the logits
// after each (backend.Verifier). The reference's forward computes every row exactly as a
// one-token call would (each row on its own, the recurrence token by token), so the rows are
// plain decoding's. The recurrent state before it is kept until Keep.
func (s *Session) Verify(tokens []int) ([][]float32, error) {
	if s.pending != nil {
		return nil, errors.New("cpu: Verify before the last one's Keep")
	}
	st := s.st
	v := &verifying{pos: st.Pos, tokens: append([]int(nil), tokens...), conv: make([][]float32, len(st.conv)),
		ssm: make([][]float32, len(st.ssm)), kvLen: make([]int, len(st.k))}
	for i := range st.conv {
		v.conv[i] = append([]float32(nil), st.conv[i]...)
		v.ssm[i] = append([]float32(nil), st.ssm[i]...)
		v.kvLen[i] = len(st.k[i])
	}
	rows, err := s.m.Forward(st, tokens, true)
	if err != nil {
		return nil, err
	}
	s.pending = v
	return rows, nil
}

// Keep leaves the session as if it had consumed only the first n tokens of the last Verify:
// the KV rows past them are dropped, and the recurrent state, which cannot be rolled back, is
// restored from before the Verify and the n tokens fed again (the reference has no cheaper way;
// its cost is why the cost gate does not draft on this backend).
func (s *Session) Keep(n int) error {
	v := s.pending
	if v == nil {
		return errors.New("cpu: Keep without a Verify")
	}
	if n < 1 || n > len(v.tokens) {
		return fmt.Errorf("cpu: keep %d of %d verified tokens", n, len(v.tokens))
	}
	s.pending = nil
	if n == len(v.tokens) {
		return nil
	}
	st := s.st
	st.Pos = v.pos
	for i := range st.conv {
		copy(st.conv[i], v.conv[i])
		copy(st.ssm[i], v.ssm[i])
		st.k[i], st.v[i] = st.k[i][:v.kvLen[i]], st.v[i][:v.kvLen[i]]
	}
	_, err := s.m.Forward(st, v.tokens[:n], false)
	return err
}
