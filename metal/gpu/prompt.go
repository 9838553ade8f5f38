package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/kernels"
)

// ErrNoImages is a GPU session's answer to a prompt holding images where its plan takes none
// (the checkpoint has no vision tower, or it was left out).
var ErrNoImages = errors.New("gpu: this backend's plan takes no images")

// piece is prompt tokens as the plan takes them: their ids (kernels.EmbedHostRow where an
// image's embedding row replaces the pad token's), those rows (nil for a text token), and each
// token's rotary offsets from its slot ([n][3], kernels.RopeOffsets; nil where the plan takes no
// images).
type piece struct {
	ids  []uint32
	rows [][]float32
	offs []uint32
}

func (p piece) len() int { return len(p.ids) }

// sub is tokens [i, j) of p.
func (p piece) sub(i, j int) piece {
	q := piece{ids: p.ids[i:j], rows: p.rows[i:j]}
	if p.offs != nil {
		q.offs = p.offs[3*i : 3*j]
	}
	return q
}

// pieceOf checks tokens and images (backend.Image) and lays them out for the plan at the
// session's position; it returns the rotary delta that holds after them.
func (s *Session) pieceOf(tokens []int, images []backend.Image) (piece, int, error) {
	c, st := s.e.w.Config, s.e.step
	n := len(tokens)
	if n == 0 {
		return piece{}, 0, fmt.Errorf("gpu: no tokens")
	}
	if len(images) > 0 && !st.Images {
		return piece{}, 0, ErrNoImages
	}
	p := piece{ids: make([]uint32, n), rows: make([][]float32, n)}
	for i, id := range tokens {
		if id < 0 || id >= c.VocabSize {
			return piece{}, 0, fmt.Errorf("gpu: token id %d outside the vocabulary [0, %d)", id, c.VocabSize)
		}
		p.ids[i] = uint32(id)
	}
	if s.pos+n > st.MaxCtx {
		return piece{}, 0, fmt.Errorf("gpu: %d positions exceed the backend's KV cache of %d", s.pos+n, st.MaxCtx)
	}
	if !st.Images {
		return p, 0, nil
	}
	pos, delta, err := backend.Positions(s.pos, s.delta(), n, images)
	if err != nil {
		return piece{}, 0, err
	}
	for _, im := range images {
		if len(im.Embeds) != im.H*im.W {
			return piece{}, 0, fmt.Errorf("gpu: an image of %d×%d tokens with %d rows", im.H, im.W, len(im.Embeds))
		}
		for i := max(im.At, 0); i < min(im.At+im.H*im.W, n); i++ {
			if row := im.Embeds[i-im.At]; len(row) != c.HiddenSize {
				return piece{}, 0, fmt.Errorf("gpu: an image row of %d values, the model's hidden size is %d", len(row), c.HiddenSize)
			}
			p.ids[i], p.rows[i] = kernels.EmbedHostRow, im.Embeds[i-im.At]
		}
	}
	p.offs = kernels.RopeOffsets(s.pos, pos)
	return p, delta, nil
}

// ForwardImages feeds a piece of prompt holding images: their rows replace the pad tokens'
// embeddings and every token takes its multimodal rotary position (a plan without images
// refuses them: ErrNoImages).
func (s *Session) ForwardImages(tokens []int, images []backend.Image, all bool) ([][]float32, error) {
	if err := s.lockKept(); err != nil {
		return nil, err
	}
	defer s.e.mu.Unlock()
	p, delta, err := s.pieceOf(tokens, images)
	if err != nil {
		return nil, err
	}
	defer func() { s.x.Mode = decode.ModeGreedy }()
	out, err := s.feed(p, all)
	if err == nil {
		s.setDelta(delta)
	}
	return out, err
}

// Forward feeds a piece of prompt and returns the logits rows (every token's when all is set,
// else the last token's).
func (s *Session) Forward(tokens []int, all bool) ([][]float32, error) {
	return s.ForwardImages(tokens, nil, all)
}

// feed runs p. The greedy mode leaves its token in the step buffer (NextToken); tokens whose
// logits are not returned skip the LM head and the selection, and go through the batched
// prefill kernels a chunk at a time (the last token always through the decode step, for its
// logits). The caller holds the step lock.
func (s *Session) feed(p piece, all bool) ([][]float32, error) {
	if sizes, rest := s.chunkSizes(p.len()); !all && len(sizes) > 0 && rest == 0 {
		// Whole chunks only: the last one computes its last row's logits and greedy token.
		done := 0
		for i, n := range sizes {
			mode := decode.ChunkModes(n).Run
			if i == len(sizes)-1 {
				mode = decode.ChunkModes(n).Last
			}
			if err := s.chunk(p.sub(done, done+n), mode); err != nil {
				return nil, err
			}
			done += n
		}
		return [][]float32{s.logits()}, nil
	}
	var out [][]float32
	if !all || s.e.step.ChunkLogits > 0 {
		rows, n, err := s.chunks(p.sub(0, p.len()-1), all)
		if err != nil {
			return nil, err
		}
		out, p = rows, p.sub(n, p.len())
	}
	for i := range p.len() {
		keep := all || i == p.len()-1
		if err := s.token(p.sub(i, i+1), keep); err != nil {
			return nil, err
		}
		if keep {
			out = append(out, s.logits())
		}
	}
	return out, nil
}

// token runs one token of p through the decode step, selecting greedily (keep: its logits are
// read) or not (ModePrefill: the layers only).
func (s *Session) token(p piece, keep bool) error {
	st := s.e.step
	if err := s.ensure(s.pos); err != nil {
		return fmt.Errorf("gpu: position %d: %w", s.pos, err)
	}
	copy(s.x.Bytes(st.StepBuf), decode.BytesOf([]uint32{uint32(s.pos), p.ids[0]}))
	if p.rows[0] != nil {
		copy(s.x.Bytes(st.Residual), decode.BytesOf(p.rows[0]))
	}
	if p.offs != nil {
		copy(s.x.Bytes(st.RopeOff), decode.BytesOf(p.offs))
	}
	s.x.Mode = decode.ModePrefill
	if keep {
		s.x.Mode = decode.ModeGreedy
	}
	if err := s.x.Step(); err != nil {
		return fmt.Errorf("gpu: position %d: %w", s.pos, err)
	}
	s.pos++
	return nil
}

// chunkSizes splits n prompt tokens into the plan's chunk sizes, largest first, and returns them
// with the tokens left over.
func (s *Session) chunkSizes(n int) (sizes []int, rest int) {
	for _, c := range s.e.step.Chunks {
		for c > 0 && n >= c {
			sizes = append(sizes, c)
			n -= c
		}
	}
	return sizes, n
}

// chunks runs p through the chunk modes, whole chunks only, and returns how many tokens it
// consumed, with every row's logits when rows is set (the plan then has the +logits modes). The
// caller holds the step lock.
func (s *Session) chunks(p piece, rows bool) ([][]float32, int, error) {
	sizes, _ := s.chunkSizes(p.len())
	var out [][]float32
	done := 0
	for _, n := range sizes {
		mode := decode.ChunkModes(n).Run
		if rows {
			mode = decode.ChunkModes(n).Logits
		}
		if err := s.chunk(p.sub(done, done+n), mode); err != nil {
			return nil, done, err
		}
		if rows {
			all := slices.Clone(decode.FloatsOf(s.x.Bytes(s.e.step.ChunkLogits))) // shared scratch
			V := s.e.w.Config.VocabSize
			for i := range n {
				out = append(out, all[i*V:(i+1)*V])
			}
		}
		done += n
	}
	return out, done, nil
}

// chunk runs one chunk of p at the session's position in mode (one of the chunk modes): its
// ids, its image rows into the chunk's residual (which the embedding leaves as they are) and its
// rotary offsets are written first.
func (s *Session) chunk(p piece, mode string) error {
	st := s.e.step
	for q := s.pos; q < s.pos+p.len(); q++ {
		if err := s.ensure(q); err != nil {
			return fmt.Errorf("gpu: position %d: %w", q, err)
		}
	}
	copy(s.x.Bytes(st.ChunkTokens), decode.BytesOf(p.ids))
	res, H := s.x.Bytes(st.ChunkResidual), 4*s.e.w.Config.HiddenSize
	for t, row := range p.rows {
		if row != nil {
			copy(res[t*H:(t+1)*H], decode.BytesOf(row))
		}
	}
	if p.offs != nil {
		copy(s.x.Bytes(st.ChunkRopeOff), decode.BytesOf(p.offs))
	}
	copy(s.x.Bytes(st.StepBuf), decode.BytesOf([]uint32{uint32(s.pos), p.ids[0]}))
	s.x.Mode = mode
	if err := s.x.Step(); err != nil {
		return fmt.Errorf("gpu: the chunk at position %d: %w", s.pos, err)
	}
	s.pos += p.len()
	return nil
}

// delta is the session's rotary delta (backend.Positions): its text runs that far from its
// slots after the images it has seen. It lives in the plan's per-row offsets (decode.Step.RopeOff,
// sequence state), so snapshots and row moves carry it; 0 where the plan takes no images.
func (s *Session) delta() int {
	if !s.e.step.Images {
		return 0
	}
	return int(int32(binary.LittleEndian.Uint32(s.x.Bytes(s.e.step.RopeOff))))
}

// setDelta sets the offsets the decode step turns the session's next tokens by: delta on each
// axis (text).
func (s *Session) setDelta(delta int) {
	if s.e.step.Images {
		d := uint32(int32(delta))
		copy(s.x.Bytes(s.e.step.RopeOff), decode.BytesOf([]uint32{d, d, d}))
	}
}

// verifying is a Verify awaiting its Keep: the position before it, its tokens, and either the
// recurrent state before it (state: host copies of the state buffers as StateSpans lists them
// without the KV pool; Session.Verify) or the multi-row step that verified them as a group (rows:
// stepRows), which left the DeltaNet states and conv windows as they were and recorded its rows
// in the rings.
type verifying struct {
	pos   int
	ids   []int
	state [][]byte
	rows  *verifyRows
}

// verifyRows is where a multi-row step verified a session's group: the lane, the group's first
// row and the rows' epoch then (rowSet.epoch), and the step entry each of its rows left.
type verifyRows struct {
	lane    *lane
	row     int
	epoch   int64
	entries []byte
}

// lockKept is lock for a step or a save, which must wait for the Keep of a Verify.
func (s *Session) lockKept() error {
	if err := s.lock(); err != nil {
		return err
	}
	if s.verify != nil {
		s.e.mu.Unlock()
		return errUnkept
	}
	return nil
}

// errUnkept is the answer to stepping or saving a session whose verified drafts await their Keep.
var errUnkept = errors.New("gpu: the session's verified drafts await their Keep")

// Verify consumes tokens (a sequence's next token and drafts after it) one at a time through the
// decode step and returns the logits after each (backend.Verifier): each row is the one-row
// decode step's at that position. The recurrent state before it is copied to the host until
// Keep. This is the correct, not the fast, way (its rows cost what plain steps do): StepRows
// verifies a Verify row as a group of rows of a multi-row step where the session lives in a row.
func (s *Session) Verify(tokens []int) ([][]float32, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.e.mu.Unlock()
	if s.verify != nil {
		return nil, errors.New("gpu: Verify before the last one's Keep")
	}
	p, _, err := s.pieceOf(tokens, nil)
	if err != nil {
		return nil, err
	}
	v := &verifying{pos: s.pos, ids: slices.Clone(tokens)}
	s.e.step.StateSpans(s.pos, nil, func(buf int, off, n int64) {
		v.state = append(v.state, slices.Clone(s.x.Bytes(buf)[off:off+n]))
	})
	defer func() { s.x.Mode = decode.ModeGreedy }()
	var out [][]float32
	for i := range p.len() {
		if err := s.token(p.sub(i, i+1), true); err != nil {
			return nil, err
		}
		out = append(out, s.logits())
	}
	s.verify = v
	return out, nil
}

// Keep leaves the session as if it had consumed only the first n tokens of the last Verify. After
// a multi-row step's group the commit kernels replay the kept rows from the rings into the states
// (ModeCommit) while no other multi-row step has run since; otherwise the recurrent state is the
// one before the Verify (restored from the host copy, or left so by the group) and the n tokens
// are fed again through the decode step. Either way the state is plain decoding's, bit for bit
// (the KV rows past the kept tokens are rewritten when the sequence gets there).
func (s *Session) Keep(n int) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.e.mu.Unlock()
	v := s.verify
	if v == nil {
		return errors.New("gpu: Keep without a Verify")
	}
	if n < 1 || n > len(v.ids) {
		return fmt.Errorf("gpu: keep %d of %d verified tokens", n, len(v.ids))
	}
	s.verify = nil
	switch {
	case v.rows != nil && len(v.ids) == 1:
		return nil // a group of one row: a plain step, its state written
	case v.rows != nil && v.rows.epoch == s.e.rows.epoch && s.row == v.rows.row:
		return s.commit(v, n)
	case v.rows == nil && n == len(v.ids):
		return nil
	}
	i := 0
	s.e.step.StateSpans(v.pos, nil, func(buf int, off, _ int64) {
		if v.state != nil {
			copy(s.x.Bytes(buf)[off:], v.state[i])
		}
		i++
	})
	s.pos = v.pos
	p, _, err := s.pieceOf(v.ids[:n], nil)
	if err != nil {
		return err
	}
	defer func() { s.x.Mode = decode.ModeGreedy }()
	for j := range n {
		// The last through the greedy mode, which leaves the step entry a plain step leaves.
		if err := s.token(p.sub(j, j+1), j == n-1); err != nil {
			return err
		}
	}
	return nil
}

// commit keeps n rows of the session's verify group: one ModeCommit step of the lane that ran it
// replays them into the row's DeltaNet states and conv windows (every other row keeps 0), and the
// session's step entry becomes the one its last kept row left: the next position, as n plain
// steps leave it, and that row's greedy token (without the session's penalties, which the later
// rows do not read; the host writes the entry's token before any step reads it).
func (s *Session) commit(v *verifying, n int) error {
	l, st := v.rows.lane, v.rows.lane.st
	keep := make([]uint32, st.Rows)
	keep[v.rows.row] = uint32(n)
	copy(l.x.Bytes(st.Keep), decode.BytesOf(keep))
	l.x.Mode = decode.ModeCommit
	err := l.x.Step()
	l.x.Mode = decode.ModeGreedy
	clear(l.x.Bytes(st.Keep))
	if err != nil {
		return fmt.Errorf("gpu: keeping %d verified rows at position %d: %w", n, v.pos, err)
	}
	s.pos = v.pos + n
	copy(s.x.Bytes(s.e.step.StepBuf), v.rows.entries[8*(n-1):8*n])
	return nil
}
