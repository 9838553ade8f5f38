package tokenizer

import "unicode/utf8"

// byteRune is GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the
// other 68 bytes map to U+0100 onwards in byte order, so every token is printable text.
// runeByte is the inverse (-1 outside the alphabet).
var byteRune, runeByte = func() (b2r [256]rune, r2b [256 + 68]int16) {
	for i := range r2b {
		r2b[i] = -1
	}
	n := rune(0)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = 256 + n
			n++
		}
		b2r[b], r2b[r] = r, int16(b)
	}
	return b2r, r2b
}()

// appendUnmapped appends the bytes a token in the byte-level alphabet stands for; ok is false
// if a rune is outside the alphabet.
func appendUnmapped(dst []byte, tok string) (out []byte, ok bool) {
	for _, r := range tok {
		if r >= rune(len(runeByte)) || runeByte[r] < 0 {
			return dst, false
		}
		dst = append(dst, byte(runeByte[r]))
	}
	return dst, true
}

// bytesOf returns the decoded bytes of id, or false for an id the tokenizer does not define.
func (t *Tokenizer) bytesOf(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.tokens) || !t.defined[id] {
		return nil, false
	}
	return t.text[t.offs[id]:t.offs[id+1]], true
}

// TokenBytes returns the bytes id decodes to (an added token's content), or false for an id the
// tokenizer does not define. The slice is shared: callers must not change it.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) { return t.bytesOf(id) }

// Decode returns the text of ids, special tokens included. Ids the tokenizer does not define
// (negative, at or above VocabSize, or holes) are skipped, as tokenizers skips unknown ids.
// Bytes that do not form valid UTF-8 become U+FFFD, like Python's errors="replace" and Rust's
// String::from_utf8_lossy (one U+FFFD per maximal invalid subsequence).
func (t *Tokenizer) Decode(ids []int) string {
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b, _ := t.bytesOf(id)
		buf = append(buf, b...)
	}
	if utf8.Valid(buf) {
		return string(buf)
	}
	return string(appendLossy(nil, buf))
}

const (
	seqValid = iota
	seqInvalid
	seqShort // a valid prefix cut off by the end of the input
)

// utf8Seq classifies the sequence at b[0] and returns its length: the whole sequence if valid,
// else the maximal valid prefix (at least one byte) that one U+FFFD replaces.
func utf8Seq(b []byte) (int, int) {
	c := b[0]
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch {
	case c < 0x80:
		return 1, seqValid
	case c < 0xC2:
		return 1, seqInvalid
	case c < 0xE0:
		need = 2
	case c < 0xF0:
		need = 3
		if c == 0xE0 {
			lo = 0xA0 // no overlong forms
		} else if c == 0xED {
			hi = 0x9F // no surrogates
		}
	case c < 0xF5:
		need = 4
		if c == 0xF0 {
			lo = 0x90
		} else if c == 0xF4 {
			hi = 0x8F // nothing above U+10FFFF
		}
	default:
		return 1, seqInvalid
	}
	for i := 1; i < need; i++ {
		if i == len(b) {
			return i, seqShort
		}
		if b[i] < lo || b[i] > hi {
			return i, seqInvalid
		}
		lo, hi = 0x80, 0xBF
	}
	return need, seqValid
}

func appendLossy(dst, b []byte) []byte {
	for len(b) > 0 {
		n, st := utf8Seq(b)
		if st == seqValid {
			dst = append(dst, b[:n]...)
		} else {
			dst = append(dst, "\uFFFD"...)
		}
		b = b[n:]
	}
	return dst
}

// StreamDecoder decodes ids one at a time, as a model generates them. The concatenation of
// everything Add and Flush return equals Decode of all ids.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
}

// NewStreamDecoder returns a decoder with nothing pending.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Add decodes one more id and returns the text that is now final: it holds back a trailing
// incomplete UTF-8 sequence that a later token may complete, so the result is always valid
// UTF-8 (bytes that can no longer become valid are already U+FFFD). Undefined ids are skipped.
func (d *StreamDecoder) Add(id int) string {
	b, ok := d.t.bytesOf(id)
	if !ok {
		return ""
	}
	d.pending = append(d.pending, b...)
	cut := 0
	for cut < len(d.pending) {
		n, st := utf8Seq(d.pending[cut:])
		if st == seqShort {
			break
		}
		cut += n
	}
	if cut == 0 {
		return ""
	}
	var out string
	if p := d.pending[:cut]; utf8.Valid(p) {
		out = string(p)
	} else {
		out = string(appendLossy(nil, p))
	}
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return out
}

// Flush returns what is pending, an incomplete sequence as U+FFFD, and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := string(appendLossy(nil, d.pending))
	d.pending = d.pending[:0]
	return out
}
