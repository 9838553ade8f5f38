//go:build !darwin

package report

// probeGPU has no Metal device to ask off macOS: the report's gpu is null.
func probeGPU() (*GPU, string) { return nil, "" }
