package syscheck

// Serving is what lily serve holds on this Mac with its serving defaults and no --ctx or
// --parallel, as the GPU backend sizes itself (metal/gpu.Size): "serving" in `lily doctor
// --output json`, which the menu-bar app reads rather than size the engine itself. Error says
// why nothing is held (the weights do not fit the GPU's working set); the numbers but the
// vision tower's are then 0.
type Serving struct {
	WorkingSet       int64  `json:"working_set_bytes"` // the GPU's working set it is sized in
	KVBits           int    `json:"kv_bits"`
	Context          int    `json:"context"` // positions a session holds
	ContextNote      string `json:"context_note,omitempty"`
	Parallel         int    `json:"parallel"` // sequences at once
	ParallelNote     string `json:"parallel_note,omitempty"`
	KVPages          int    `json:"kv_pages"`
	PrefillChunk     int    `json:"prefill_chunk"` // the largest batched prefill chunk
	PrefillSlice     int    `json:"prefill_slice"` // prompt tokens per engine-loop step
	PrefillRoute     string `json:"prefill_route"` // tensor or simdgroup
	PrefillRouteNote string `json:"prefill_route_note,omitempty"`
	// VisionBytes is what the vision tower holds (its weights and largest image's activations),
	// set aside before the context; 0 where --vision auto leaves it out, VisionNote saying why.
	VisionBytes int64  `json:"vision_bytes"`
	VisionNote  string `json:"vision_note,omitempty"`
	Error       string `json:"error,omitempty"`
}
