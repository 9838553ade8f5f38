package server

import (
	"math"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series /metrics exposes.
type metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	promptTokens    prometheus.Counter
	cachedTokens    prometheus.Counter
	generatedTokens prometheus.Counter
	ttft            prometheus.Histogram
	decodeRate      prometheus.Gauge
	lastDecodeBits  atomic.Uint64 // float64 bits of the last generation's decode tok/s
	// imagePlaceholders counts images that became a text placeholder (imagePlaceholder).
	imagePlaceholders prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lily_requests_total", Help: "HTTP requests by endpoint and status."}, []string{"endpoint", "status"})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lily_prompt_tokens_total", Help: "Prompt tokens processed or served from the prefix cache."})
	m.cachedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lily_prompt_tokens_cached_total", Help: "Prompt tokens served from the prefix cache."})
	m.generatedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "lily_generated_tokens_total", Help: "Tokens generated."})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lily_time_to_first_token_seconds", Help: "Time from admission to the first generated token.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)})
	m.decodeRate = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lily_decode_tokens_per_second", Help: "Decode speed of the last finished generation."})
	queue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_queue_depth", Help: "Requests waiting or running."}, func() float64 { return float64(s.sched.depth()) })
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_running_sequences", Help: "Requests generating at once in the engine loop."}, func() float64 { n, _ := s.load(); return float64(n) })
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_waiting_sequences", Help: "Requests the engine loop holds back for a place or for memory."}, func() float64 { _, n := s.load(); return float64(n) })
	parallel := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_parallel_sequences", Help: "Sequences the engine loop runs at once at most (--parallel)."}, func() float64 { return float64(s.parallel()) })
	batchedSteps := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_batched_steps_total", Help: "Decode steps that advanced several sequences at once (one multi-row GPU step)."}, func() float64 { n, _ := s.batched(); return float64(n) })
	batchedRows := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_batched_rows_total", Help: "Sequence rows those steps advanced (over lily_batched_steps_total: the mean batch)."}, func() float64 { _, n := s.batched(); return float64(n) })
	cacheHits := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_prefix_cache_hits_total", Help: "Prefix-cache lookups that reused a snapshot."}, func() float64 { return float64(s.cacheStats().Hits) })
	cacheMisses := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_prefix_cache_misses_total", Help: "Prefix-cache lookups that found nothing."}, func() float64 { return float64(s.cacheStats().Misses) })
	cacheBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_prefix_cache_bytes", Help: "Memory held by prefix-cache snapshots."}, func() float64 { return float64(s.cacheStats().Bytes) })
	cacheEntries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_prefix_cache_entries", Help: "Prefix-cache snapshots held."}, func() float64 { return float64(s.cacheStats().Entries) })
	cacheEvictions := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_prefix_cache_evictions_total", Help: "Prefix-cache snapshots evicted to stay within the budget."}, func() float64 { return float64(s.cacheStats().Evictions) })
	diskFiles := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_prefix_cache_disk_files", Help: "Snapshots in the prefix cache's disk tier."}, func() float64 { return float64(s.diskStats().Files) })
	diskBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lily_prefix_cache_disk_bytes", Help: "Bytes of the prefix cache's disk tier."}, func() float64 { return float64(s.diskStats().Bytes) })
	diskLoads := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_prefix_cache_disk_loads_total", Help: "Prefixes restored from disk."}, func() float64 { return float64(s.diskStats().Loads) })
	diskWrites := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_prefix_cache_disk_writes_total", Help: "Snapshots written to disk."}, func() float64 { return float64(s.diskStats().Writes) })
	m.imagePlaceholders = prometheus.NewCounter(prometheus.CounterOpts{Name: "lily_image_placeholders_total", Help: "Images in prompts that could not be used and became a text placeholder."})
	encodes := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_image_encodes_total", Help: "Images the vision tower encoded."}, func() float64 { n, _ := s.imageStats(); return float64(n) })
	imageHits := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lily_image_cache_hits_total", Help: "Images served from the cache of encoded images (not encoded again)."}, func() float64 { _, n := s.imageStats(); return float64(n) })
	m.reg.MustRegister(m.imagePlaceholders, encodes, imageHits, newDraftCollector(s))
	m.reg.MustRegister(m.requests, m.promptTokens, m.cachedTokens, m.generatedTokens, m.ttft, m.decodeRate, queue, running, waiting, parallel, batchedSteps, batchedRows, cacheHits, cacheMisses, cacheBytes, cacheEntries, cacheEvictions,
		diskFiles, diskBytes, diskLoads, diskWrites)
	return m
}

func (m *metrics) setDecodeRate(tokS float64) {
	m.lastDecodeBits.Store(math.Float64bits(tokS))
	m.decodeRate.Set(tokS)
}

func (m *metrics) lastDecodeTokS() float64 { return math.Float64frombits(m.lastDecodeBits.Load()) }
