package backend

import "fmt"

// Image is an encoded image's place in a piece of prompt fed to a session: its rows replace the
// embeddings of the image-pad tokens at indices At … At+H·W−1 of the piece, and those tokens take
// the image's two-dimensional rotary positions. A piece may hold part of an image (a prompt fed in
// chunks): At may be negative (the image began in an earlier piece) or At+H·W may pass the piece's
// end (it goes on in the next); each piece names the whole image with At relative to its start.
type Image struct {
	At     int
	H, W   int         // the merged grid: the image's token rows and columns
	Embeds [][]float32 // H·W rows of the model's hidden size, row-major over the grid
}

// Positions are the multimodal rotary positions of n tokens fed at slots start … start+n−1 of a
// sequence whose text positions run delta ahead of (or behind) their slots: per token its time,
// height and width positions. A text token at slot s is at (s+δ, s+δ, s+δ). An image whose first
// token is at slot a is at p = a+δ: its token (r, c) at (p, p+r, p+c); after it δ grows by
// max(H, W) − H·W, so the next text token's position is p + max(H, W) (the image advances the
// position by its longer side, not by its token count). It returns the positions and the δ that
// holds after the piece. The model's reference builds the same rows for a whole prompt from
// slot 0 and δ 0.
func Positions(start, delta, n int, images []Image) ([3][]int, int, error) {
	var pos [3][]int
	for a := range pos {
		pos[a] = make([]int, n)
	}
	next := 0 // the first index not yet placed
	for _, im := range images {
		lo, hi := max(im.At, 0), min(im.At+im.H*im.W, n)
		if im.H <= 0 || im.W <= 0 || lo < next || hi <= lo {
			return pos, delta, fmt.Errorf("backend: image at %d (%d×%d) is out of order or outside the %d tokens", im.At, im.H, im.W, n)
		}
		for i := next; i < lo; i++ {
			pos[0][i], pos[1][i], pos[2][i] = start+i+delta, start+i+delta, start+i+delta
		}
		p := start + im.At + delta
		for i := lo; i < hi; i++ {
			r, c := (i-im.At)/im.W, (i-im.At)%im.W
			pos[0][i], pos[1][i], pos[2][i] = p, p+r, p+c
		}
		if im.At+im.H*im.W <= n { // the image ends in this piece
			delta += max(im.H, im.W) - im.H*im.W
		}
		next = hi
	}
	for i := next; i < n; i++ {
		pos[0][i], pos[1][i], pos[2][i] = start+i+delta, start+i+delta, start+i+delta
	}
	return pos, delta, nil
}
