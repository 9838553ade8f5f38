// Command agenttrace writes the synthetic coding-agent conversation that `lily bench
// --agent-trace` replays (testdata/agent/trace.json): go run ./tools/agenttrace > testdata/agent/trace.json
package main

import (
	"encoding/json"
	"os"

	"github.com/lilyformac/lily/internal/agenttrace"
)

func main() {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(agenttrace.Synthetic(agenttrace.Default)); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
