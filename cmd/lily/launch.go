package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/internal/launch"
)

// keyEnv is the variable `lily serve` and `lily launch` read the API key from.
const keyEnv = "LILY_API_KEY"

// exitStatus is a launched client's nonzero exit status, for main to exit with (after the
// client has said what went wrong itself).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("the client exited with status %d", int(e)) }

func newLaunchCmd() *cobra.Command {
	var url, key string
	var print bool
	names := strings.Join(launch.Names(), ", ")
	cmd := &cobra.Command{
		Use:   "launch CLIENT [--url URL] [--api-key KEY] [--print] [-- CLIENT-ARGS…]",
		Short: "Run Claude Code, Codex, opencode or Qwen Code against the running Lily server",
		Long: "Asks the running server for its model and context window, then runs the client (" + names + ") pointed at it\n" +
			"through environment variables and arguments alone: no configuration file is written. Arguments after -- go to the client.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("name a client: %s", names)
			}
			if _, ok := launch.Lookup(args[0]); !ok {
				return fmt.Errorf("unknown client %q: expected one of %s", args[0], names)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := launchTarget(cmd, url, key)
			if err != nil {
				return err
			}
			c, _ := launch.Lookup(args[0])
			s := c.Setup(t, args[1:]...)
			if print {
				_, err := fmt.Fprint(cmd.OutOrStdout(), s.Shell())
				return err
			}
			status, err := s.Run(launch.Stdio{In: cmd.InOrStdin(), Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr()})
			if err == nil && status != 0 {
				err = exitStatus(status)
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (arguments for the client go after --)", err)
	})
	f := cmd.Flags()
	f.StringVar(&url, "url", launch.DefaultURL, "the Lily server")
	f.StringVar(&key, "api-key", "", "the server's API key (default $"+keyEnv+")")
	f.BoolVar(&print, "print", false, "print the shell lines that do the same instead of running the client")
	return cmd
}

// launchTarget asks the server; a key taken from $LILY_API_KEY stays a reference in --print's
// lines, so that they do not carry the key itself.
func launchTarget(cmd *cobra.Command, url, key string) (launch.Target, error) {
	fromEnv := !cmd.Flags().Changed("api-key")
	if fromEnv {
		key = os.Getenv(keyEnv)
	}
	t, err := launch.Discover(cmd.Context(), url, key)
	if err == nil && fromEnv && key != "" {
		t.KeyEnv = keyEnv
	}
	return t, err
}
