package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

const testdata = "../../testdata/tokenizer/"

type vectorFile struct {
	RegexQwen3  string `json:"regex_qwen3"`
	RegexQwen35 string `json:"regex_qwen35"`
	Cases       []struct {
		Category     string
		Text         string
		IDsQwen3     []int    `json:"ids_qwen3"`
		IDsQwen35    []int    `json:"ids_qwen35"`
		PiecesQwen3  []string `json:"pieces_qwen3"`
		PiecesQwen35 []string `json:"pieces_qwen35"`
	}
	FlagsAddedTokens json.RawMessage `json:"flags_added_tokens"`
	FlagsCases       []struct {
		Text    string
		IDs     []int
		Decoded string
	} `json:"flags_cases"`
	DecodeCases []struct {
		IDs  []int
		Text string
	} `json:"decode_cases"`
}

var (
	fixtureOnce          sync.Once
	rawQwen3             []byte
	qwen3, qwen35        *Tokenizer
	vectors              vectorFile
	errFixture           error
	qwen3Gzip, qwen3Path = "qwen3-tokenizer.json.gz", "../../resources/qwen3-tokenizer.json.gz"
)

// fixtures loads the committed Qwen3 tokenizer.json (and a copy with the Qwen3.5/3.6 regex
// substituted) and the reference vectors once per test binary.
func fixtures(tb testing.TB) (*Tokenizer, *Tokenizer, *vectorFile) {
	tb.Helper()
	fixtureOnce.Do(func() {
		var gz []byte
		if gz, errFixture = os.ReadFile(qwen3Path); errFixture != nil {
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			errFixture = err
			return
		}
		if rawQwen3, errFixture = io.ReadAll(zr); errFixture != nil {
			return
		}
		vf, err := os.ReadFile(testdata + "qwen3_vectors.json")
		if err != nil {
			errFixture = err
			return
		}
		if errFixture = json.Unmarshal(vf, &vectors); errFixture != nil {
			return
		}
		if qwen3, errFixture = LoadJSON(rawQwen3); errFixture != nil {
			return
		}
		qwen35, errFixture = LoadJSON(withPattern(tb, rawQwen3, PatternQwen35))
	})
	if errFixture != nil {
		tb.Fatal(errFixture)
	}
	return qwen3, qwen35, &vectors
}

func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimSpace(b.Bytes())
}

// withPattern returns the tokenizer.json with its Qwen3 split regex replaced.
func withPattern(tb testing.TB, raw []byte, pattern string) []byte {
	old := jsonString(PatternQwen3)
	if bytes.Count(raw, old) != 1 {
		tb.Fatalf("the tokenizer.json does not contain the Qwen3 regex once")
	}
	return bytes.Replace(raw, old, jsonString(pattern), 1)
}

func TestVectorsMatchHF(t *testing.T) {
	t3, t35, v := fixtures(t)
	if v.RegexQwen3 != PatternQwen3 || v.RegexQwen35 != PatternQwen35 {
		t.Fatal("the vectors were made with other regexes than the scanners implement")
	}
	if len(v.Cases) < 200 {
		t.Fatalf("only %d cases", len(v.Cases))
	}
	differ := 0
	for _, c := range v.Cases {
		if !slices.Equal(c.IDsQwen3, c.IDsQwen35) {
			differ++
		}
		for _, r := range []struct {
			name   string
			tok    *Tokenizer
			ids    []int
			pieces []string
		}{{"qwen3", t3, c.IDsQwen3, c.PiecesQwen3}, {"qwen35", t35, c.IDsQwen35, c.PiecesQwen35}} {
			got := r.tok.Encode(c.Text)
			if !slices.Equal(got, r.ids) {
				t.Errorf("%s %s %q:\n got %v\nwant %v", r.name, c.Category, c.Text, got, r.ids)
			}
			if d, want := r.tok.Decode(got), norm.NFC.String(c.Text); d != want {
				t.Errorf("%s: decode(encode(%q)) = %q, want NFC %q", r.name, c.Text, d, want)
			}
			var pieces []string
			for _, p := range r.tok.splits[0].split(c.Text, nil) {
				b := []rune{}
				for i := 0; i < len(p); i++ {
					b = append(b, byteRune[p[i]])
				}
				pieces = append(pieces, string(b))
			}
			if !slices.Equal(pieces, r.pieces) {
				t.Errorf("%s split %q:\n got %q\nwant %q", r.name, c.Text, pieces, r.pieces)
			}
		}
	}
	// The vocabulary was trained with the Qwen3 regex, so only mark-heavy text differs; if
	// nothing did, the second pass would prove nothing.
	if differ == 0 {
		t.Error("no case encodes differently under the two regexes")
	}
}

func TestAddedTokenFlagsMatchHF(t *testing.T) {
	fixtures(t)
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(rawQwen3, &doc); err != nil {
		t.Fatal(err)
	}
	doc["added_tokens"] = vectors.FlagsAddedTokens
	raw, _ := json.Marshal(doc)
	tok, err := LoadJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range vectors.FlagsCases {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%q:\n got %v\nwant %v", c.Text, got, c.IDs)
		}
		if d := tok.Decode(c.IDs); d != c.Decoded {
			t.Errorf("decode %v = %q, want %q", c.IDs, d, c.Decoded)
		}
	}
}

func TestDecodeMatchesHF(t *testing.T) {
	tok, _, v := fixtures(t)
	invalid := 0
	for _, c := range v.DecodeCases {
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("decode %v = %q, want %q", c.IDs, got, c.Text)
		}
		if strings.ContainsRune(c.Text, utf8.RuneError) {
			invalid++
		}
	}
	if invalid < 10 {
		t.Errorf("only %d decode cases exercise invalid UTF-8", invalid)
	}
}

// streamDecode feeds ids one at a time and checks every piece is valid UTF-8.
func streamDecode(tb testing.TB, tok *Tokenizer, ids []int) string {
	d := tok.NewStreamDecoder()
	var b strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			tb.Fatalf("Add(%d) returned invalid UTF-8 %q (ids %v)", id, s, ids)
		}
		b.WriteString(s)
	}
	b.WriteString(d.Flush())
	return b.String()
}

func TestStreamDecoderEqualsDecode(t *testing.T) {
	t3, t35, v := fixtures(t)
	all := [][]int{}
	for _, c := range v.Cases {
		all = append(all, c.IDsQwen3, c.IDsQwen35)
	}
	for _, c := range v.DecodeCases {
		all = append(all, c.IDs)
	}
	for _, ids := range all {
		for _, tok := range []*Tokenizer{t3, t35} {
			if got, want := streamDecode(t, tok, ids), tok.Decode(ids); got != want {
				t.Fatalf("stream %v = %q, want %q", ids, got, want)
			}
		}
	}
	// "好" is three byte tokens: nothing may come out before the last one.
	d := t3.NewStreamDecoder()
	var parts []string
	for _, b := range []byte("好") {
		id, _ := t3.TokenID(string(byteRune[b]))
		parts = append(parts, d.Add(id))
	}
	if !slices.Equal(parts, []string{"", "", "好"}) || d.Flush() != "" {
		t.Fatalf("byte tokens of 好 streamed as %q", parts)
	}
	// A truncated sequence is one U+FFFD at Flush.
	id, _ := t3.TokenID(string(byteRune[0xe5]))
	if s := d.Add(id); s != "" {
		t.Fatalf("Add(lead byte) = %q", s)
	}
	if s := d.Flush(); s != "\uFFFD" {
		t.Fatalf("Flush = %q", s)
	}
}

func TestVocabBounds(t *testing.T) {
	tok, _, v := fixtures(t)
	if n := tok.VocabSize(); n != 151669 {
		t.Fatalf("VocabSize = %d, want 151669 (151643 BPE + 26 added)", n)
	}
	for _, c := range v.Cases {
		for _, id := range c.IDsQwen3 {
			if id >= tok.VocabSize() {
				t.Fatalf("reference id %d out of range", id)
			}
		}
	}
	hello := tok.Encode("Hello")
	for _, bad := range []int{tok.VocabSize(), tok.VocabSize() + 1000, -1} {
		if _, ok := tok.Token(bad); ok {
			t.Errorf("Token(%d) is defined", bad)
		}
		if got := tok.Decode(append([]int{bad}, hello...)); got != "Hello" {
			t.Errorf("Decode with id %d = %q, want it skipped", bad, got)
		}
		if s := tok.NewStreamDecoder().Add(bad); s != "" {
			t.Errorf("stream Add(%d) = %q", bad, s)
		}
		if tok.IsSpecial(bad) {
			t.Errorf("IsSpecial(%d)", bad)
		}
	}
}

func TestTokenLookups(t *testing.T) {
	tok, _, _ := fixtures(t)
	for _, c := range []struct {
		token   string
		id      int
		special bool
	}{
		{"<|endoftext|>", 151643, true}, {"<|im_start|>", 151644, true}, {"<|im_end|>", 151645, true},
		{"<tool_call>", 151657, false}, {"<think>", 151667, false}, {"</think>", 151668, false},
		{"Ġthe", 279, false}, {"Ċ", 198, false}, {"!", 0, false},
	} {
		id, ok := tok.TokenID(c.token)
		if !ok || id != c.id || tok.IsSpecial(id) != c.special {
			t.Errorf("TokenID(%q) = %d %v special %v, want %d special %v", c.token, id, ok, tok.IsSpecial(id), c.id, c.special)
		}
		if s, ok := tok.Token(c.id); !ok || s != c.token {
			t.Errorf("Token(%d) = %q", c.id, s)
		}
	}
	if got := tok.Encode("<|im_start|>"); !slices.Equal(got, []int{151644}) {
		t.Errorf("special token encodes as %v", got)
	}
}

func TestInvalidUTF8Input(t *testing.T) {
	tok, _, _ := fixtures(t)
	// One U+FFFD per maximal invalid subsequence, as in Decode: \xe4\xb8 is one, \xff\xff two.
	got := tok.Encode("a\xe4\xb8b\xff\xffc")
	if want := tok.Encode("a\uFFFDb\uFFFD\uFFFDc"); !slices.Equal(got, want) {
		t.Fatalf("invalid bytes encode as %v, want %v", got, want)
	}
}

// tiny builds a byte-level tokenizer.json whose merges are listed in an order unrelated to
// the ids of their results.
func tiny(merges string, extra map[string]any) []byte {
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteRune[b])] = b
	}
	vocab["ab"], vocab["bc"], vocab["abc"], vocab["ĠĠ"] = 300, 299, 298, 297
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": []any{map[string]any{"id": 400, "content": "<s>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternQwen35}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": json.RawMessage(merges)},
	}
	for k, v := range extra {
		doc[k] = v
	}
	raw, _ := json.Marshal(doc)
	return raw
}

func TestMergeFormsAndRanks(t *testing.T) {
	for _, c := range []struct {
		merges string
		want   []int
	}{
		// b+c outranks a+b, so "abc" is a + bc; the ids (299 < 300) must not matter.
		{`["b c", "a b", "a bc"]`, []int{298}},
		{`[["b","c"], ["a","b"], ["ab","c"]]`, []int{'a', 299}},
		{`[["a","b"], ["b","c"], ["ab","c"]]`, []int{298}},
		{`["a b", "b c"]`, []int{300, 'c'}},
	} {
		tok, err := LoadJSON(tiny(c.merges, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode("abc"); !slices.Equal(got, c.want) {
			t.Errorf("merges %s: abc = %v, want %v", c.merges, got, c.want)
		}
		if got := tok.Encode("x<s>abc"); got[1] != 400 || tok.VocabSize() != 401 || !tok.IsSpecial(400) {
			t.Errorf("added token: %v, VocabSize %d", got, tok.VocabSize())
		}
		if _, ok := tok.Token(350); ok || tok.Decode([]int{350, 'x'}) != "x" {
			t.Error("an id hole is defined")
		}
	}
}

func TestRegexpFallback(t *testing.T) {
	// A ByteLevel pre-tokenizer with use_regex splits GPT-2 style: " 123" stays one piece,
	// which the Qwen scanners would cut into single digits.
	raw := tiny(`["a b"]`, map[string]any{"pre_tokenizer": map[string]any{"type": "ByteLevel", "use_regex": true}})
	tok, err := LoadJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var pieces []string
	for _, s := range tok.splits {
		pieces = s.split("ab 123  x", pieces)
	}
	if want := []string{"ab", " 123", " ", " x"}; !slices.Equal(pieces, want) {
		t.Fatalf("pieces %q, want %q", pieces, want)
	}
	// A String pattern is a literal, not a regex.
	raw = tiny(`["a b"]`, map[string]any{"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"String": ".*"}, "behavior": "Isolated"},
		map[string]any{"type": "ByteLevel"},
	}}})
	lit, err := LoadJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := lit.splits[0].split("ab.*cd.x", nil); !slices.Equal(got, []string{"ab", ".*", "cd.x"}) {
		t.Fatalf("literal split %q", got)
	}
	// In the tiny vocab every byte's id is the byte.
	if got := tok.Encode("ab 12"); !slices.Equal(got, []int{300, ' ', '1', '2'}) {
		t.Fatalf("encode = %v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	good := string(tiny(`["a b"]`, nil))
	for _, c := range []struct {
		name, json, want string
	}{
		{"not json", `{`, "tokenizer.json"},
		{"not BPE", strings.Replace(good, `"type":"BPE"`, `"type":"WordPiece"`, 1), `model type "WordPiece"`},
		{"pre-tokenizer", strings.Replace(good, `"type":"Split"`, `"type":"Metaspace"`, 1), `pre_tokenizer "Metaspace"`},
		{"behavior", strings.Replace(good, `"Isolated"`, `"Removed"`, 1), `behavior "Removed"`},
		{"no ByteLevel", strings.Replace(good, `{"add_prefix_space":false,"trim_offsets":false,"type":"ByteLevel","use_regex":false}`, `{"type":"Split","pattern":{"String":" "},"behavior":"Isolated"}`, 1), "not byte-level"},
		{"bad regex", strings.Replace(good, `"Regex":"(?i:`, `"Regex":"((?i:`, 1), "split pattern"},
		{"normalizer", strings.Replace(good, `{"type":"NFC"}`, `{"type":"Lowercase"}`, 1), `normalizer "Lowercase"`},
		{"decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"}`, `"decoder":{"type":"WordPiece"}`, 1), "decoder"},
		{"merge unknown", strings.Replace(good, `["a b"]`, `["a b","a q"]`, 1), "merges[1]"},
		{"merge form", strings.Replace(good, `["a b"]`, `["ab"]`, 1), "not two space-separated tokens"},
		{"merge pair", strings.Replace(good, `["a b"]`, `[["a","b","c"]]`, 1), "not a pair"},
		{"no byte", strings.Replace(good, `"Ā":0,`, ``, 1), "byte-level token"},
	} {
		if c.json == good {
			t.Fatalf("%s: the replacement did not apply", c.name)
		}
		_, err := LoadJSON([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	fixtures(t)
	tok, err := Load(qwen3Path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tok.Encode("Hello world"), []int{9707, 1879}) {
		t.Fatal("gzipped tokenizer encodes differently")
	}
	// A tokenizer_config.json beside it adds the tokens only it lists.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), tiny(`["a b"]`, nil), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"added_tokens_decoder": {
		"400": {"content": "<s>", "special": true}, "401": {"content": "<extra>", "special": true}}}`), 0o644)
	tok, err = Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("a<extra>"); tok.VocabSize() != 402 || !slices.Equal(got, []int{'a', 401}) {
		t.Fatalf("config token: VocabSize %d, encode %v", tok.VocabSize(), got)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("no error for a missing file")
	}
}

func BenchmarkEncode(b *testing.B) {
	_, tok, v := fixtures(b)
	var text strings.Builder
	for _, c := range v.Cases {
		text.WriteString(c.Text)
		text.WriteByte('\n')
	}
	s := text.String()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s)
	}
}

func TestConcurrentEncode(t *testing.T) {
	_, tok, v := fixtures(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(v.Cases); i += 2 {
				if got := tok.Encode(v.Cases[i].Text); !slices.Equal(got, v.Cases[i].IDsQwen35) {
					t.Errorf("concurrent encode of case %d differs", i)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkLoad(b *testing.B) {
	fixtures(b)
	for b.Loop() {
		LoadJSON(rawQwen3)
	}
}

// unbatched encodes text the way Encode did before the first split stage was batched: every
// stage over the whole of each normalized segment at once.
func unbatched(tok *Tokenizer, text string) []int {
	sc := new(scratch)
	return tok.raw.split(text, nil, math.MaxInt, func(s string, ids []int) []int {
		return tok.normed.split(tok.normalize(s), ids, math.MaxInt, func(s string, ids []int) []int {
			pieces := []string{s}
			for _, sp := range tok.splits {
				var next []string
				for _, p := range pieces {
					next = sp.split(p, next)
				}
				pieces = next
			}
			for _, w := range pieces {
				ids = tok.encodeWord(w, ids, sc)
			}
			return ids
		})
	})
}

// TestEncodeLimit: batching the first split stage changes no id (a text of many batches encodes
// as the unbatched pipeline does); a limit ends encoding early with ok=false and a prefix of
// the ids; and the work done is proportional to the text consumed, not to the whole text.
func TestEncodeLimit(t *testing.T) {
	t3, t35, v := fixtures(t)
	var b strings.Builder
	for b.Len() < 1<<19 {
		for _, c := range v.Cases {
			b.WriteString(c.Text)
			b.WriteString("\n")
		}
	}
	long := b.String()
	for name, tok := range map[string]*Tokenizer{"qwen3": t3, "qwen35": t35} {
		want := unbatched(tok, long)
		if len(want) < 4*piecesPerBatch {
			t.Fatalf("%s: only %d ids: the text spans too few batches", name, len(want))
		}
		if got, ok := tok.EncodeLimit(long, len(want)); !ok || !slices.Equal(got, want) {
			t.Fatalf("%s: EncodeLimit at the exact count: ok %v, %d ids equal %v", name, ok, len(got), slices.Equal(got, want))
		}
		if got := tok.Encode(long); !slices.Equal(got, want) {
			t.Fatalf("%s: Encode differs from the unbatched pipeline", name)
		}
		for _, limit := range []int{0, 1, 100, len(want) / 2, len(want) - 1} {
			got, ok := tok.EncodeLimit(long, limit)
			if ok || len(got) <= limit || !slices.Equal(got, want[:len(got)]) {
				t.Fatalf("%s limit %d: ok %v, %d ids, prefix %v", name, limit, ok, len(got), len(got) <= len(want) && slices.Equal(got, want[:len(got)]))
			}
		}
	}
	// 15 MB of NFC ASCII code against a 32k context: the allocations are those of the ids and a
	// batch of pieces, far below the text's size (all of it tokenized allocates ~350 MB).
	huge := strings.Repeat("func f(x int) int { return x*2 + 1 } // comment\n", (15<<20)/49)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids, ok := t3.EncodeLimit(huge, 32768)
	runtime.ReadMemStats(&after)
	if ok || len(ids) <= 32768 {
		t.Fatalf("15 MB text within 32768 tokens? ok %v, %d ids", ok, len(ids))
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("EncodeLimit(15 MB, 32768): %d ids, %d bytes allocated", len(ids), alloc)
	if alloc > 4<<20 {
		t.Fatalf("EncodeLimit(15 MB, 32768) allocated %d bytes", alloc)
	}
}

func TestTokenBytesAndAdded(t *testing.T) {
	tok, _, _ := fixtures(t)
	for _, c := range []struct {
		id    int
		bytes string
		added bool
	}{
		{279, " the", false}, {198, "\n", false}, {151657, "<tool_call>", true}, {151645, "<|im_end|>", true},
	} {
		b, ok := tok.TokenBytes(c.id)
		if !ok || string(b) != c.bytes || tok.IsAdded(c.id) != c.added {
			t.Errorf("TokenBytes(%d) = %q %v, IsAdded %v; want %q added %v", c.id, b, ok, tok.IsAdded(c.id), c.bytes, c.added)
		}
	}
	for _, bad := range []int{-1, tok.VocabSize()} {
		if _, ok := tok.TokenBytes(bad); ok || tok.IsAdded(bad) {
			t.Errorf("id %d is defined or added", bad)
		}
	}
}
