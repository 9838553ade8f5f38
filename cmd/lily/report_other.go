//go:build !darwin

package main

// reportProbeGPU has no Metal device to ask off macOS: the report's gpu is null.
func reportProbeGPU() (*reportGPU, string) { return nil, "" }
