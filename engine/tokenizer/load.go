package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Load reads a tokenizer.json (or a gzipped .json.gz). A tokenizer_config.json beside it may add
// tokens through its added_tokens_decoder, as transformers does: entries whose id the
// tokenizer.json does not define become added tokens (Qwen3.5/3.6 checkpoints may list some
// audio tokens only there).
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	f, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	if raw, err := os.ReadFile(cfgPath); err == nil {
		if err := f.mergeConfig(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	}
	t, err := build(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// LoadJSON builds a tokenizer from the contents of a tokenizer.json.
func LoadJSON(data []byte) (*Tokenizer, error) {
	f, err := parse(data)
	if err != nil {
		return nil, err
	}
	return build(f)
}

type addedJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	ContinuingSubwordPrefix string   `json:"continuing_subword_prefix"`
	EndOfWordSuffix         string   `json:"end_of_word_suffix"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
}

type fileJSON struct {
	AddedTokens  []addedJSON
	Normalizer   json.RawMessage
	PreTokenizer json.RawMessage
	Decoder      json.RawMessage
	Model        modelJSON
	vocab        map[string]int
	merges       [][2]string
}

// parse reads a tokenizer.json in one pass. The vocab and merges are nearly all of the file;
// reading them without encoding/json's reflection makes loading several times faster.
func parse(data []byte) (*fileJSON, error) {
	var f fileJSON
	r := &jsonReader{b: data}
	err := r.object(func(key string) error {
		var err error
		switch key {
		case "added_tokens":
			err = r.decode(&f.AddedTokens)
		case "normalizer":
			f.Normalizer, err = r.value()
		case "pre_tokenizer":
			f.PreTokenizer, err = r.value()
		case "decoder":
			f.Decoder, err = r.value()
		case "model":
			rest := []byte{'{'} // the small fields, for encoding/json
			err = r.object(func(key string) error {
				var err error
				switch key {
				case "vocab":
					f.vocab, err = r.vocab()
				case "merges":
					f.merges, err = r.merges()
				default:
					var v []byte
					if v, err = r.value(); err == nil {
						if len(rest) > 1 {
							rest = append(rest, ',')
						}
						rest = append(append(strconv.AppendQuote(rest, key), ':'), v...)
					}
				}
				return err
			})
			if err == nil {
				err = json.Unmarshal(append(rest, '}'), &f.Model)
			}
		default:
			_, err = r.value()
		}
		return err
	})
	if err == nil && r.next() != 0 {
		err = r.errorf("data after the top-level object")
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return &f, nil
}

// mergeConfig adds the added_tokens_decoder entries of a tokenizer_config.json whose ids the
// tokenizer.json lacks.
func (f *fileJSON) mergeConfig(raw []byte) error {
	var cfg struct {
		Decoder map[string]addedJSON `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	have := map[int]bool{}
	for _, a := range f.AddedTokens {
		have[a.ID] = true
	}
	for _, id := range f.vocab {
		have[id] = true
	}
	for key, a := range cfg.Decoder {
		id, err := strconv.Atoi(key)
		if err != nil {
			return fmt.Errorf("added_tokens_decoder key %q is not an id", key)
		}
		if !have[id] {
			a.ID = id
			f.AddedTokens = append(f.AddedTokens, a)
		}
	}
	return nil
}

type typed struct {
	Type string `json:"type"`
}

func typeOf(raw json.RawMessage) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	return t.Type, nil
}

// normalizers parses the normalizer: null, one of the Unicode normal forms, or a Sequence of them.
func normalizers(raw json.RawMessage) ([]norm.Form, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	if f, ok := forms[n.Type]; ok {
		return []norm.Form{f}, nil
	}
	if n.Type != "Sequence" {
		return nil, fmt.Errorf("normalizer %q is not supported (only NFC, NFD, NFKC, NFKD and Sequence)", n.Type)
	}
	var out []norm.Form
	for _, r := range n.Normalizers {
		fs, err := normalizers(r)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// preTokenizers parses the pre_tokenizer into split stages. It must end with a ByteLevel step,
// which maps bytes to the vocabulary's alphabet (and, with use_regex, splits GPT-2 style first).
func preTokenizers(raw json.RawMessage) ([]splitter, error) {
	var steps []json.RawMessage
	typ, err := typeOf(raw)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if typ == "Sequence" {
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		steps = seq.PreTokenizers
	} else {
		steps = []json.RawMessage{raw}
	}
	var out []splitter
	for i, step := range steps {
		var p struct {
			Type    string `json:"type"`
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior       string `json:"behavior"`
			Invert         bool   `json:"invert"`
			AddPrefixSpace bool   `json:"add_prefix_space"`
			UseRegex       bool   `json:"use_regex"`
		}
		if err := json.Unmarshal(step, &p); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
		last := i == len(steps)-1
		switch p.Type {
		case "Split":
			if p.Behavior != "Isolated" || p.Invert {
				return nil, fmt.Errorf("pre_tokenizer Split: behavior %q invert %v is not supported (only Isolated, not inverted)", p.Behavior, p.Invert)
			}
			var pattern string
			switch {
			case p.Pattern.Regex != nil:
				pattern = *p.Pattern.Regex
			case p.Pattern.String != nil:
				pattern = regexpQuote(*p.Pattern.String)
			default:
				return nil, errors.New("pre_tokenizer Split: pattern has neither Regex nor String")
			}
			s, err := newSplitter(pattern)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
			}
			out = append(out, s)
		case "ByteLevel":
			if !last {
				return nil, errors.New("pre_tokenizer: ByteLevel must be the last step")
			}
			if p.AddPrefixSpace {
				return nil, errors.New("pre_tokenizer ByteLevel: add_prefix_space is not supported")
			}
			if p.UseRegex {
				s, _ := newSplitter(patternGPT2)
				out = append(out, s)
			}
			return out, nil
		default:
			return nil, fmt.Errorf("pre_tokenizer %q is not supported (only Split and ByteLevel)", p.Type)
		}
	}
	return nil, errors.New("pre_tokenizer: not byte-level (no ByteLevel step)")
}

// regexpQuote escapes a literal for regexp2.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$#`, r) || r == ' ' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// jsonReader is a minimal JSON reader for parse.
type jsonReader struct {
	b []byte
	i int
}

func (r *jsonReader) errorf(format string, args ...any) error {
	return fmt.Errorf("byte %d: "+format, append([]any{r.i}, args...)...)
}

// next skips white space and returns the next byte (0 at the end).
func (r *jsonReader) next() byte {
	for r.i < len(r.b) && (r.b[r.i] == ' ' || r.b[r.i] == '\n' || r.b[r.i] == '\r' || r.b[r.i] == '\t') {
		r.i++
	}
	if r.i == len(r.b) {
		return 0
	}
	return r.b[r.i]
}

func (r *jsonReader) skip(c byte) bool {
	if r.next() == c {
		r.i++
		return true
	}
	return false
}

// value returns the raw bytes of the next value; encoding/json checks them if they are decoded.
func (r *jsonReader) value() ([]byte, error) {
	if r.next() == 0 {
		return nil, r.errorf("unexpected end")
	}
	start := r.i
	switch r.b[r.i] {
	case '"':
		return r.rawString()
	case '{', '[':
		for depth := 0; r.i < len(r.b); r.i++ {
			switch r.b[r.i] {
			case '"':
				if _, err := r.rawString(); err != nil {
					return nil, err
				}
				r.i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					r.i++
					return r.b[start:r.i], nil
				}
			}
		}
		return nil, r.errorf("unexpected end")
	default: // a number, true, false or null
		for r.i < len(r.b) && strings.IndexByte(",:}] \n\r\t", r.b[r.i]) < 0 {
			r.i++
		}
		return r.b[start:r.i], nil
	}
}

func (r *jsonReader) decode(v any) error {
	raw, err := r.value()
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	return err
}

// rawString returns the next string with its quotes, r.i just past it.
func (r *jsonReader) rawString() ([]byte, error) {
	if r.next() != '"' {
		return nil, r.errorf("expected a string")
	}
	start := r.i
	for r.i++; r.i < len(r.b) && r.b[r.i] != '"'; r.i++ {
		if r.b[r.i] == '\\' {
			r.i++
		}
	}
	if r.i >= len(r.b) {
		return nil, r.errorf("unterminated string")
	}
	r.i++
	return r.b[start:r.i], nil
}

func (r *jsonReader) str() (string, error) {
	raw, err := r.rawString()
	if err != nil {
		return "", err
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err = json.Unmarshal(raw, &s)
	return s, err
}

// object calls f for each key of an object; f must consume the value.
func (r *jsonReader) object(f func(key string) error) error {
	if !r.skip('{') {
		return r.errorf("expected an object")
	}
	for first := true; !r.skip('}'); first = false {
		if !first && !r.skip(',') {
			return r.errorf("expected , or }")
		}
		key, err := r.str()
		if err != nil {
			return err
		}
		if !r.skip(':') {
			return r.errorf("expected :")
		}
		if err := f(key); err != nil {
			return err
		}
	}
	return nil
}

// array calls f for each element of an array; f must consume it.
func (r *jsonReader) array(f func() error) error {
	if !r.skip('[') {
		return r.errorf("expected an array")
	}
	for first := true; !r.skip(']'); first = false {
		if !first && !r.skip(',') {
			return r.errorf("expected , or ]")
		}
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func (r *jsonReader) vocab() (map[string]int, error) {
	// A Qwen tokenizer.json has about one vocab entry and one merge per 80 bytes.
	vocab := make(map[string]int, len(r.b)/80)
	err := r.object(func(tok string) error {
		raw, err := r.value()
		if err != nil {
			return err
		}
		id, err := strconv.Atoi(string(raw))
		if err != nil {
			return fmt.Errorf("model.vocab: token %q: id %s is not an integer", tok, raw)
		}
		vocab[tok] = id
		return nil
	})
	return vocab, err
}

// merges accepts both the "a b" and the ["a","b"] forms.
func (r *jsonReader) merges() ([][2]string, error) {
	out := make([][2]string, 0, len(r.b)/80)
	err := r.array(func() error {
		n := len(out)
		if r.next() == '[' {
			var pair []string
			err := r.array(func() error {
				s, err := r.str()
				pair = append(pair, s)
				return err
			})
			if err != nil {
				return err
			}
			if len(pair) != 2 {
				return fmt.Errorf("merges[%d]: %q is not a pair of tokens", n, pair)
			}
			out = append(out, [2]string{pair[0], pair[1]})
			return nil
		}
		s, err := r.str()
		if err != nil {
			return err
		}
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return fmt.Errorf("merges[%d]: %q is not two space-separated tokens", n, s)
		}
		out = append(out, [2]string{a, b})
		return nil
	})
	return out, err
}
