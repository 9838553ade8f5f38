// Command tokbench is the Go half of tools/refgen/tokbench.sh: it encodes the benchmark chunks
// single-threaded with engine/tokenizer and writes the ids (uint32 little-endian) and MB/s.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/lilyformac/lily/engine/tokenizer"
)

func main() {
	dir := flag.String("dir", "", "directory with chunks.json; results are written there")
	tokPath := flag.String("tokenizer", "resources/qwen3-tokenizer.json.gz", "Qwen3 tokenizer.json.gz")
	regex := flag.String("regex", "qwen3", "qwen3, or qwen35 to substitute the Qwen3.5/3.6 split regex")
	flag.Parse()
	runtime.GOMAXPROCS(1)

	raw, err := os.ReadFile(*tokPath)
	check(err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	check(err)
	raw, err = io.ReadAll(zr)
	check(err)
	if *regex == "qwen35" {
		old, _ := json.Marshal(tokenizer.PatternQwen3)
		pat, _ := json.Marshal(tokenizer.PatternQwen35)
		if bytes.Count(raw, old) != 1 {
			log.Fatal("the tokenizer.json does not hold the Qwen3 regex")
		}
		raw = bytes.Replace(raw, old, pat, 1)
	}
	var chunks []string
	data, err := os.ReadFile(filepath.Join(*dir, "chunks.json"))
	check(err)
	check(json.Unmarshal(data, &chunks))
	n := 0
	for _, c := range chunks {
		n += len(c)
	}

	best := 0.0
	var ids []int
	for pass := range 3 {
		tok, err := tokenizer.LoadJSON(raw) // a fresh word cache each pass
		check(err)
		runtime.GC()
		ids = ids[:0]
		start := time.Now()
		for _, c := range chunks {
			ids = append(ids, tok.Encode(c)...)
		}
		rate := float64(n) / 1e6 / time.Since(start).Seconds()
		fmt.Printf("%s: Go pass %d: %.2f MB/s\n", *regex, pass+1, rate)
		best = max(best, rate)
	}
	out := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(id))
	}
	check(os.WriteFile(filepath.Join(*dir, "go-"+*regex+".ids"), out, 0o644))
	check(os.WriteFile(filepath.Join(*dir, "go-"+*regex+".rate"), []byte(fmt.Sprint(best)), 0o644))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
