package emu

import "embed"

// runtimeFS holds the C++ runtime: the MSL header, its include shims, the scheduler and the
// helper-process main.
//
//go:embed runtime
var runtimeFS embed.FS
