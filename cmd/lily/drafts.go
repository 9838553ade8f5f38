package main

import (
	"github.com/spf13/pflag"

	"github.com/lilyformac/lily/engine/runner"
)

// draftsHelp is --drafts' help, the same on every command that generates.
const draftsHelp = "speculative decoding: auto (a cost gate drafts where the backend's step makes it pay), off, or always (draft whenever the drafter has a candidate; for tests). Outputs are the same in every mode"

// draftsFlag adds --drafts (runner.DraftOptions.Mode, auto by default) to f.
func draftsFlag(f *pflag.FlagSet, mode *string) {
	f.StringVar(mode, "drafts", runner.DraftsAuto, draftsHelp)
}
