package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// oracle is regexp2 running the pattern, the reference for the scanners. Oniguruma (used by
// the Rust tokenizers) case-folds U+017F to s in (?i:'s); regexp2 does not, so the oracle
// spells that out.
func oracle(pattern string) splitter {
	return regexSplitter{regexp2.MustCompile(strings.Replace(pattern, `(?i:'s|`, `(?i:'[sſ]|`, 1), regexp2.None)}
}

var scanners = []struct {
	name    string
	pattern string
}{{"qwen3", PatternQwen3}, {"qwen35", PatternQwen35}}

// randomText draws runes from the classes the patterns care about, heavy in white space
// (ASCII, Unicode and near-misses), marks, digits, emoji and CR/LF.
var randomPools = []string{
	" \t\n\r\v\f\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2007\u200a\u2028\u2029\u202f\u205f\u3000",
	"\ufeff\u200b\u200c\u200d\u180e\u001c\u001f\u0000",
	"\u0301\u0308\u0323\u0e34\u0e48\u093f\u094d\u0903\u20dd\u0488\u302a\ufe0f\U000e0067",
	"0123456789\u0660\u0669\u06f5\u0966\u0e52\uff10\u2160\u216b\u00bd\u00b2\u2460\U0001d7ce",
	"abcxyzSTLDMRVE\u00e9\u00df\u017f\u0131\u4f60\u597d\u3042\u30ab\ud55c\u0e01\u0915\u0627\u05d0\u0416\u03a9",
	"'''\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`\u2014\u2026\u00ab\u3002\uff01",
	"\U0001f600\U0001f44d\U0001f3fd\U0001f1eb\U0001f1f7\u2764\U0001f469\u200d\U0001f4bb\U0001f3f4",
	"\r\n\r\n\n\r",
}

func randomText(r *rand.Rand) string {
	var b strings.Builder
	n := 1 + r.IntN(40)
	for range n {
		pool := []rune(randomPools[r.IntN(len(randomPools))])
		b.WriteRune(pool[r.IntN(len(pool))])
		if r.IntN(8) == 0 { // contractions and words, in any case
			b.WriteString([]string{"'s", "'LL", "'Re", "'ve", "'d", "'M", "'t", "'ſ", "word", " x"}[r.IntN(10)])
		}
	}
	return b.String()
}

func checkSplit(t *testing.T, sp, want splitter, s string) bool {
	t.Helper()
	got := sp.split(s, nil)
	exp := want.split(s, nil)
	if !slices.Equal(got, exp) {
		t.Errorf("split %q:\n got %q\nwant %q", s, got, exp)
		return false
	}
	return true
}

func TestScannersMatchRegexp2(t *testing.T) {
	_, _, v := fixtures(t)
	texts := []string{"", "'", "'l", "'ll", "'S", " '", "  ", " \n", "\n ", "a \u0301", "1\u0301", "\r\n \r\n  x"}
	for _, c := range v.Cases {
		texts = append(texts, c.Text)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		texts = append(texts, randomText(r))
	}
	for _, sc := range scanners {
		sp, err := newSplitter(sc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if _, native := sp.(*scanner); !native {
			t.Fatalf("%s runs on regexp2", sc.name)
		}
		want, fails := oracle(sc.pattern), 0
		for _, s := range texts {
			if !checkSplit(t, sp, want, s) {
				if fails++; fails > 10 {
					t.Fatal("too many failures")
				}
			}
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"Hello, world!", "it's 'LL", "a\u0301 \u3000\r\n 1\u0301", "  \n\n  x", "👍🏽 ٣"} {
		f.Add(s)
	}
	type pair struct{ sp, want splitter }
	var pairs []pair
	for _, sc := range scanners {
		sp, _ := newSplitter(sc.pattern)
		pairs = append(pairs, pair{sp, oracle(sc.pattern)})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) { // Encode repairs invalid input before splitting
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		for _, p := range pairs {
			checkSplit(t, p.sp, p.want, s)
		}
	})
}

// FuzzStreamDecode reads the input as ids (two bytes each, biased to the 256 byte tokens and
// the added tokens) and checks that streaming them equals decoding them at once.
func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte{0xe5, 0x00, 0xa5, 0x00, 0xbd, 0x00})
	f.Add([]byte("\x01\x02\x03\x04\xff\xff"))
	tok, _, _ := fixtures(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var ids []int
		for i := 0; i+1 < len(in); i += 2 {
			x := int(in[i]) | int(in[i+1])<<8
			switch {
			case x < 0x100:
				ids = append(ids, int(tok.byteID[x]))
			case x >= 0xff00:
				ids = append(ids, tok.VocabSize()-30+x-0xff00) // added tokens and undefined ids
			default:
				ids = append(ids, x*2)
			}
		}
		if got, want := streamDecode(t, tok, ids), tok.Decode(ids); got != want {
			t.Fatalf("stream %v = %q, want %q", ids, got, want)
		}
	})
}

func BenchmarkSplit(b *testing.B) {
	_, _, v := fixtures(b)
	var text strings.Builder
	for _, c := range v.Cases {
		text.WriteString(c.Text)
	}
	s := text.String()
	for _, sc := range scanners {
		sp, _ := newSplitter(sc.pattern)
		b.Run(sc.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			var dst []string
			for b.Loop() {
				dst = sp.split(s, dst[:0])
			}
		})
		b.Run(sc.name+"-regexp2", func(b *testing.B) {
			re := oracle(sc.pattern)
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				re.split(s, nil)
			}
		})
	}
}
