// Command lily is Lily's engine binary: it runs Qwen3.6-35B-A3B checkpoints from the command line.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	err := newRootCmd().Execute()
	var status exitStatus
	if errors.As(err, &status) {
		os.Exit(int(status)) // lily launch: the client's own status, which it has explained
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lily:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "lily",
		Short:         "Run Qwen3.6-35B-A3B (MLX 4-bit) locally",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newBenchCmd(), newServeCmd(), newTokenizeCmd(), newDetokenizeCmd(), newRenderCmd(), newPullCmd(), newDoctorCmd(), newLaunchCmd())
	return root
}
