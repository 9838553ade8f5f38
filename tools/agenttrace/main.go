// Command agenttrace writes the synthetic coding-agent conversations that `lily bench
// --agent-trace` replays: go run ./tools/agenttrace > testdata/agent/trace.json, and the
// rewriting one that `lily bench --drafts` reads: go run ./tools/agenttrace -rewrite >
// testdata/agent/rewrite.json.
package main

import (
	"encoding/json"
	"flag"
	"os"

	"github.com/lilyformac/lily/internal/agenttrace"
)

func main() {
	rewrite := flag.Bool("rewrite", false, "write the rewriting trace (a file read, then written back whole with a small edit)")
	flag.Parse()
	o := agenttrace.Default
	if *rewrite {
		o = agenttrace.Rewriting
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(agenttrace.Synthetic(o)); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
