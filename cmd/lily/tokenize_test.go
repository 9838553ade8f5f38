package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const qwen3Tokenizer = "../../resources/qwen3-tokenizer.json.gz"

func TestTokenizeRoundTrip(t *testing.T) {
	text := "<|im_start|>user\nName the two colors of a chessboard.<|im_end|>\n"
	want := []int{151644, 872, 198, 675, 279, 1378, 7987, 315, 264, 32719, 2482, 13, 151645, 198}
	out, err := execute(t, "tokenize", "--tokenizer", qwen3Tokenizer, "--text", text)
	if err != nil {
		t.Fatalf("tokenize: %v\n%s", err, out)
	}
	var res tokenizeOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil || !slices.Equal(res.IDs, want) {
		t.Fatalf("tokenize printed %s (%v), want ids %v", out, err, want)
	}

	file := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(file, []byte(text), 0o644)
	out, err = execute(t, "tokenize", "--tokenizer", qwen3Tokenizer, "--text-file", file, "--output", "text")
	if err != nil || out != "151644,872,198,675,279,1378,7987,315,264,32719,2482,13,151645,198\n" {
		t.Fatalf("tokenize --output text: %q %v", out, err)
	}

	out, err = execute(t, "detokenize", "--tokenizer", qwen3Tokenizer, "--ids", strings.TrimSpace(out))
	if err != nil || out != text {
		t.Fatalf("detokenize = %q %v, want %q (no newline added)", out, err, text)
	}

	out, err = execute(t, "tokenize", "--tokenizer", qwen3Tokenizer, "--text", "")
	if err != nil || strings.TrimSpace(out) != `{"ids":[]}` {
		t.Fatalf("empty text: %q %v", out, err)
	}
}

func TestTokenizeErrors(t *testing.T) {
	tok := qwen3Tokenizer
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--text", "x"}, "--tokenizer FILE is required"},
		{[]string{"tokenize", "--tokenizer", tok}, "exactly one of --text and --text-file"},
		{[]string{"tokenize", "--tokenizer", tok, "--text", "x", "--text-file", "f"}, "exactly one of"},
		{[]string{"tokenize", "--tokenizer", tok, "--text", "x", "--output", "xml"}, `--output "xml"`},
		{[]string{"tokenize", "--tokenizer", tok, "--text-file", filepath.Join(t.TempDir(), "none")}, "--text-file"},
		{[]string{"tokenize", "--tokenizer", t.TempDir(), "--text", "x"}, "tokenizer.json"},
		{[]string{"detokenize", "--tokenizer", tok, "--ids", "1,151669"}, "outside the vocabulary [0, 151669)"},
		{[]string{"detokenize", "--tokenizer", tok, "--ids", "1,-2"}, "outside the vocabulary"},
		{[]string{"detokenize", "--tokenizer", tok, "--ids", "1,x"}, `item 2 ("x")`},
	}
	for _, c := range cases {
		out, err := execute(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v (%s), want an error containing %q", c.args, err, out, c.want)
		}
	}
}
