package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/demo"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/syscheck"
	"github.com/lilyformac/lily/engine/prefixcache"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/internal/wiredlimit"
	"github.com/lilyformac/lily/metal/gpu"
	"github.com/lilyformac/lily/metal/mtl"
	"github.com/lilyformac/lily/resources"
	"github.com/lilyformac/lily/server"
)

type serveOptions struct {
	model, backend, host, apiKey, cors, allowedHosts          string
	prefillRoute                                              gpu.RouteChoice
	port, ctx, queue, cacheMB, maxBodyMB, emuMemoryMB, kvBits int
	maxOutput, prefillChunk, ollamaPort, parallel             int
	diskCacheGB                                               float64
	demo, insecure, exitWithParent                            bool
	timeout, stallTimeout, idleUnload                         time.Duration
	images                                                    imageOptions
	drafts                                                    string // --drafts (runner.DraftOptions.Mode)
}

const idleUnloadHelp = "release the model and its caches after this long without requests, freeing their memory (about 20 GB); the next request that needs the model, or POST /status/load, loads it again and waits for it (0: never)"

// shutdownGrace is how long a SIGTERM waits for open requests: they are ended at once (streams
// with an error event and [DONE]), so this is only the time to say so; it stays below the
// menu-bar app's 10 s before SIGKILL.
const shutdownGrace = 5 * time.Second

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--model DIR | --demo]",
		Short: "Serve the model on an OpenAI-compatible HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("api-key") {
				o.apiKey = os.Getenv("LILY_API_KEY") // read here, not as the flag's default: --help would print it
			}
			applyMemoryDefaults(cmd.Flags(), o.backend, int64(wiredlimit.Memory()), &o.kvBits, &o.prefillChunk, &o.cacheMB)
			return runServe(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "checkpoint directory")
	f.BoolVar(&o.demo, "demo", false, "serve the built-in tiny demo model (random weights, real tokenizer and chat template)")
	f.StringVar(&o.backend, "backend", defaultBackend(), backendHelp)
	f.StringVar(&o.host, "host", "127.0.0.1", "address to bind (anything but loopback needs --api-key)")
	f.IntVar(&o.port, "port", 8000, "port")
	f.IntVar(&o.ollamaPort, "ollama-port", 0, "also serve on 127.0.0.1 at this port, for apps that assume Ollama's address (Ollama's default is 11434; 0: off)")
	f.StringVar(&o.apiKey, "api-key", "", "require this bearer key (default $LILY_API_KEY)")
	f.BoolVar(&o.insecure, "insecure", false, "allow a non-loopback bind without an API key")
	f.IntVar(&o.ctx, "ctx", 0, "context length in tokens (default: the model's)")
	f.IntVar(&o.kvBits, "kv-bits", 16, kvBitsHelp+"; on metal the default is 8 on Macs under 32 GB, where context comes first")
	f.IntVar(&o.prefillChunk, "prefill-chunk", -1, prefillChunkHelp+"; on Macs under 32 GB the default is 512")
	f.Var(&o.prefillRoute, "prefill-route", prefillRouteHelp)
	f.StringVar(&o.cors, "cors", "", "comma-separated browser origins allowed besides pages on this machine and desktop apps: exact origins, scheme://* or *")
	f.StringVar(&o.allowedHosts, "allowed-hosts", "", "comma-separated Host names this server may be reached under besides localhost and its addresses: names, .domain (with subdomains) or *")
	f.IntVar(&o.maxOutput, "max-output-tokens", 0, "the most tokens one answer generates, whatever the request asks (0: what the context leaves); for clients that send no limit or a large one (Codex sends none, Claude Code 32,000)")
	f.IntVar(&o.queue, "queue", 16, "requests that may wait while --parallel generate (more get 429; 0: none may wait)")
	f.IntVar(&o.parallel, "parallel", 0, parallelHelp)
	f.IntVar(&o.cacheMB, "cache-mb", 4096, "prefix-cache memory budget in MiB (0 disables; default on metal 4096, 1024 on Macs under 32 GB)")
	f.Float64Var(&o.diskCacheGB, "disk-cache-gb", 8, "prefix-cache budget on disk in GiB, under the user cache directory, so conversations survive a restart (0 disables)")
	f.IntVar(&o.maxBodyMB, "max-body-mb", 64, "largest request body in MiB (agents send every image of a conversation again on each turn, base64 in the body)")
	f.DurationVar(&o.timeout, "request-timeout", 30*time.Minute, "per-request time limit")
	f.IntVar(&o.emuMemoryMB, "emu-gpu-memory-mb", 0, "with --backend emu: the GPU working set to size the KV cache in, as Metal's recommendedMaxWorkingSetSize (0: no limit)")
	f.BoolVar(&o.exitWithParent, "exit-with-parent", false, exitWithParentHelp)
	f.DurationVar(&o.stallTimeout, "stall-timeout", 30*time.Second, "drop a client that sends no more of its request body, or accepts no response data, for this long (its generation is cancelled)")
	f.DurationVar(&o.idleUnload, "idle-unload", 0, idleUnloadHelp)
	o.images.flags(f)
	draftsFlag(f, &o.drafts)
	return cmd
}

// isLoopback reports whether host only accepts local connections.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// check rejects option values that have no meaning, naming the flag.
func (o serveOptions) check() error {
	switch {
	case !isLoopback(o.host) && o.apiKey == "" && !o.insecure:
		return fmt.Errorf("--host %s exposes the server beyond this machine: set --api-key (or $LILY_API_KEY), or pass --insecure to allow it without one", o.host)
	case o.port < 0 || o.port > 65535:
		return fmt.Errorf("--port %d: expected 0..65535", o.port)
	case o.ollamaPort < 0 || o.ollamaPort > 65535:
		return fmt.Errorf("--ollama-port %d: expected 1..65535 (Ollama's default is 11434), or 0: off", o.ollamaPort)
	case o.ollamaPort != 0 && o.ollamaPort == o.port:
		return fmt.Errorf("--ollama-port %d is --port too: the main port serves the Ollama API already", o.ollamaPort)
	case o.demo && o.model != "":
		return errors.New("--demo and --model are exclusive")
	case o.maxOutput < 0:
		return fmt.Errorf("--max-output-tokens %d: expected 0 (no cap) or more", o.maxOutput)
	case o.parallel < 0 || o.parallel > maxParallel:
		return fmt.Errorf("--parallel %d: expected 1 to %d requests generating at once (0: by memory)", o.parallel, maxParallel)
	case o.queue < 0:
		return fmt.Errorf("--queue %d: expected 0 or more waiting requests (0: a request that arrives while one generates gets 429)", o.queue)
	case o.maxBodyMB < 1:
		return fmt.Errorf("--max-body-mb %d: expected at least 1", o.maxBodyMB)
	case o.diskCacheGB < 0:
		return fmt.Errorf("--disk-cache-gb %g: expected 0 (no disk tier) or more", o.diskCacheGB)
	case o.cacheMB < 0:
		return fmt.Errorf("--cache-mb %d: expected 0 (no prefix cache) or more", o.cacheMB)
	case o.emuMemoryMB < 0 || o.emuMemoryMB > 0 && o.backend != "emu":
		return fmt.Errorf("--emu-gpu-memory-mb %d: expected 0 or more, and only with --backend emu", o.emuMemoryMB)
	case o.ctx < 0:
		return fmt.Errorf("--ctx %d: expected a positive number of tokens (0: the model's)", o.ctx)
	case o.timeout <= 0:
		return fmt.Errorf("--request-timeout %v: expected a positive duration", o.timeout)
	case o.stallTimeout <= 0:
		return fmt.Errorf("--stall-timeout %v: expected a positive duration", o.stallTimeout)
	case o.idleUnload < 0:
		return fmt.Errorf("--idle-unload %v: expected a duration such as 15m, or 0: never", o.idleUnload)
	}
	if err := checkKVBits(o.kvBits, o.backend); err != nil {
		return err
	}
	if err := checkPrefillRoute(o.prefillRoute, o.backend); err != nil {
		return err
	}
	if err := o.images.check(); err != nil {
		return err
	}
	if err := runner.CheckDrafts(o.drafts); err != nil {
		return fmt.Errorf("--%v", err)
	}
	return checkPrefillChunk(o.prefillChunk)
}

// splitList reads a comma-separated flag value.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func runServe(cmd *cobra.Command, o serveOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	state := lifecycle.NewState(stderr)
	startup := &lifecycle.Runner{State: state}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.exitWithParent {
		if err := checkParentPipe(os.Stdin); err != nil {
			return err
		}
		ctx = withParent(ctx, os.Stdin, stderr)
	}
	held := &heldModel{}
	defer held.release()
	var publish func(*server.Model, func()) // set once srv exists; the server calls Load only after startup
	cfg := server.Config{
		APIKey: o.apiKey, CORSOrigins: splitList(o.cors), AllowedHosts: splitList(o.allowedHosts), BindHost: o.host,
		MaxBodyBytes: int64(o.maxBodyMB) << 20, QueueLimit: o.queue, MaxOutputTokens: o.maxOutput, RequestTimeout: o.timeout, StallTimeout: o.stallTimeout,
		Status: func() any { return state.Status() },
		Retry: func() error {
			if st := state.Status(); st.Phase != lifecycle.PhaseError {
				return fmt.Errorf("nothing to retry: startup is in phase %s", st.Phase)
			}
			go startup.Retry(ctx)
			return nil
		},
	}
	if o.idleUnload > 0 {
		cfg.IdleUnload = o.idleUnload
		cfg.Load, cfg.Unload = reloading(state, o, func(m *server.Model, closeFn func()) { publish(m, closeFn) }, held)
	}
	srv := server.New(cfg)
	// publish serves m; a new closeFn means freshly loaded weights replace (and free) older ones.
	publish = func(m *server.Model, closeFn func()) {
		srv.SetModel(m)
		if closeFn != nil {
			held.replace(closeFn)
		}
	}
	startup.Steps = startupSteps(o, publish)
	lns, err := o.listen()
	if err != nil {
		return err
	}
	ln, hs := lns[0], srv.HTTPServer()
	fmt.Fprintf(stderr, "lily: listening at http://%s/v1 (status at /status)\n", ln.Addr())
	if len(lns) > 1 {
		fmt.Fprintf(stderr, "lily: Ollama API also at http://%s\n", lns[1].Addr())
	}
	errc := make(chan error, len(lns))
	for _, l := range lns {
		go func() { errc <- hs.Serve(l) }() // one server: Shutdown closes every listener
	}
	go func() {
		if err := startup.Run(ctx); err == nil {
			fmt.Fprintf(stderr, "lily: ready at http://%s/v1\n", ln.Addr())
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		stop() // a second signal ends the process at once
		return shutdown(stderr, srv, hs)
	}
}

// heldModel is how to free the loaded model: its disk tier (queued snapshot writes finish first,
// as at shutdown, so conversations survive an unload as they survive a restart), then its backend.
type heldModel struct {
	mu    sync.Mutex
	close func()
}

// replace frees the model held before and holds the one closeFn frees.
func (h *heldModel) replace(closeFn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.close != nil {
		h.close()
	}
	h.close = closeFn
}

func (h *heldModel) release() { h.replace(nil) }

// reloading is how serve --idle-unload releases the idle model (phase unloaded) and loads it
// again: through the load and warm phases, which /status shows as it does at startup.
func reloading(state *lifecycle.State, o serveOptions, publish func(*server.Model, func()), held *heldModel) (load func(context.Context) error, unload func()) {
	dir := o.model
	if dir == "" && !o.demo {
		dir = lifecycle.ModelDir(lifecycle.DefaultRepo)
	}
	load = func(ctx context.Context) error {
		return (&lifecycle.Runner{State: state, Steps: loadSteps(o, dir, publish)}).Run(ctx)
	}
	unload = func() {
		state.Enter(lifecycle.PhaseUnloaded, fmt.Sprintf("idle for %v: the model's memory is free; the next request loads it again", o.idleUnload))
		held.release()
		debug.FreeOSMemory() // the Go heap's share (the cpu backend's caches) goes back to the OS now, not minutes later
	}
	return load, unload
}

// listen binds the port, and the Ollama port if one is asked for (loopback only: it is there for
// apps on this machine that assume Ollama's address).
func (o serveOptions) listen() ([]net.Listener, error) {
	ln, err := listenTCP(o.host, o.port, "stop the other server or pass --port")
	if err != nil {
		return nil, err
	}
	if o.ollamaPort == 0 {
		return []net.Listener{ln}, nil
	}
	oln, err := listenTCP("127.0.0.1", o.ollamaPort, "is Ollama running? Quit it, or pass another --ollama-port")
	if err != nil {
		ln.Close()
		return nil, err
	}
	return []net.Listener{ln, oln}, nil
}

// listenTCP binds host:port; a port in use is an error that says so, with hint.
func listenTCP(host string, port int, hint string) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	var se *os.SyscallError
	if errors.As(err, &se) && errors.Is(se.Err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("port %d is already in use: %s", port, hint)
	}
	return ln, err
}

// shutdown ends open requests (streams get an error event and [DONE]), waits up to
// shutdownGrace for their connections to finish, then closes what is left. A requested stop
// is a clean exit either way.
func shutdown(log io.Writer, srv *server.Server, hs *http.Server) error {
	fmt.Fprintln(log, "lily: shutting down")
	srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		fmt.Fprintf(log, "lily: connections still open after %v were closed (%v)\n", shutdownGrace, err)
		hs.Close()
	}
	return nil
}

// startupSteps are serve's phases: checks → pull-if-missing → verify → checks → load → warm
// (→ ready). The first checks need no weights (macOS, chip, memory, the GPU's working set, free
// disk for what is left to download), so a Mac that cannot run the model fails before the 19 GB
// download, not after it; the second run all of them, the model's files included. A user-given
// --model skips the pull and the first checks; the demo model needs only load and warm.
func startupSteps(o serveOptions, publish func(*server.Model, func())) []lifecycle.Step {
	dir := o.model
	var steps []lifecycle.Step
	switch {
	case o.demo:
	case dir == "":
		dir = lifecycle.ModelDir(lifecycle.DefaultRepo)
		steps = append(steps,
			syscheck.PreflightStep(syscheck.Config{
				DataDir: lifecycle.ModelsDir(), ModelDir: dir, Repo: lifecycle.DefaultRepo, Revision: lifecycle.DefaultRevision, Machine: serveMachine,
			}),
			lifecycle.PullIfMissing(hub.New(), lifecycle.DefaultRepo, lifecycle.DefaultRevision, dir, pullHold))
		fallthrough
	default:
		steps = append(steps, lifecycle.VerifyStep(dir, hub.VerifyFast), checksStep(dir))
	}
	return append(steps, loadSteps(o, dir, publish)...)
}

// loadSteps are the load and warm phases of the checkpoint in dir: startup's last two, and all of
// a load after an idle unload.
func loadSteps(o serveOptions, dir string, publish func(*server.Model, func())) []lifecycle.Step {
	var loaded *server.Model
	return []lifecycle.Step{
		{Phase: lifecycle.PhaseLoad, Run: func(ctx context.Context, s *lifecycle.State) error {
			opts := o
			opts.model = dir
			m, closeFn, err := loadServedModel(opts)
			if err != nil {
				return err
			}
			loaded = m
			publish(nil, closeFn)
			detail := fmt.Sprintf("%s: context %d", m.ID, m.Context)
			if m.ContextWhy != "" {
				detail += " (" + m.ContextWhy + ")"
			}
			s.SetProgress(1, detail)
			return nil
		}},
		{Phase: lifecycle.PhaseWarm, Run: func(ctx context.Context, s *lifecycle.State) error {
			// One short generation outside the prefix cache pays the first-use costs.
			_, err := loaded.Runner.Generate(ctx, runner.Request{Prompt: []int{0}, MaxTokens: 1, NoCache: true},
				func(runner.Token) (bool, error) { return true, nil })
			if err != nil {
				return err
			}
			publish(loaded, nil)
			return nil
		}},
	}
}

// pullHold keeps the Mac from idle-sleeping through the download (a process activity, as the
// runner holds while generating); tests put a counter in its place.
var pullHold lifecycle.Hold = mtl.BeginActivity

// serveMachine, when set, is the machine serve's checks judge instead of this one: tests run
// startup on a made-up Mac (too small for the model, or big enough) without probing the host.
var serveMachine *syscheck.Machine

// checksStep runs the doctor's blocking checks for the production model; the small test-family
// checkpoints need none of its memory and GPU limits.
func checksStep(dir string) lifecycle.Step {
	real := syscheck.Step(syscheck.Config{DataDir: lifecycle.ModelsDir(), ModelDir: dir, Machine: serveMachine})
	return lifecycle.Step{Phase: lifecycle.PhaseChecks, Run: func(ctx context.Context, s *lifecycle.State) error {
		cfg, err := config.Load(dir)
		if err != nil {
			return err
		}
		if cfg.Profile != config.ProfileProduction {
			s.SetProgress(1, "test-family model: system checks skipped")
			return nil
		}
		return real.Run(ctx, s)
	}}
}

// loadServedModel opens the checkpoint (or builds the demo one) with its tokenizer and template.
func loadServedModel(o serveOptions) (*server.Model, func(), error) {
	dir, id := o.model, ""
	switch {
	case o.demo:
		var err error
		if dir, err = demoDir(); err != nil {
			return nil, nil, fmt.Errorf("demo model: %w", err)
		}
		id = "lily-demo"
	case dir == "":
		return nil, nil, errors.New("--model DIR is required (or --demo to try the API with a tiny built-in model)")
	default:
		id = filepath.Base(filepath.Clean(dir))
	}
	b, cfg, closeBackend, err := openBackend(o.backend, dir, backendOptions{ctx: o.ctx, emuMemory: int64(o.emuMemoryMB) << 20, kvBits: o.kvBits, cacheBytes: int64(o.cacheMB) << 20, prefillChunk: o.prefillChunk, parallel: o.parallel,
		prefillRoute: o.prefillRoute, vision: o.images.vision, imagePixels: o.images.maxPixels})
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	tmpl, err := chat.Load(dir)
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	desc := b.Describe()
	ctxLen := cmp.Or(o.ctx, desc.Context)
	var why string
	if o.ctx == 0 {
		why = desc.ContextWhy
	}
	stops := slices.Clone(cfg.EOSTokenIDs)
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(s); ok && !slices.Contains(stops, id) {
			stops = append(stops, id)
		}
	}
	disk, err := openDiskCache(o, dir, b)
	if err != nil {
		closeBackend()
		return nil, nil, err
	}
	m := &server.Model{
		ID:     id,
		Size:   weightBytes(dir),
		Params: parameterCount(cfg),
		Runner: runner.New(b, runner.Options{CacheBytes: int64(o.cacheMB) << 20, Context: ctxLen, Parallel: parallelOf(b, o.parallel), Hold: mtl.BeginActivity, Disk: disk,
			Drafts: runner.DraftOptions{Mode: o.drafts}}),
		Tokenizer:  server.TokenizerOf(tok),
		Template:   server.TemplateOf(tmpl),
		StopIDs:    stops,
		Context:    ctxLen,
		ContextWhy: why,
		Prefill:    prefillRouteOf(desc),
		Vocab:      sync.OnceValues(func() (*grammar.Vocab, error) { return grammar.VocabFromTokenizer(tok, cfg.VocabSize, stops) }),
	}
	m.Memory = modelMemory(o.backend, m.Size, m.Runner)
	m.Images, m.VisionWhy = o.images.encoder(dir, cfg, b)
	return m, func() {
		if disk != nil {
			disk.Close() // queued snapshot writes finish first
		}
		closeBackend()
	}, nil
}

// modelMemory is the bytes the engine holds for the model, as /status reports it. On metal the
// model lives in Metal's allocations, so it is what the device has allocated for this process
// (currentAllocatedSize: weights, KV pool, activations). The cpu and emu backends keep it all in
// process memory (mapped weights, caches on the Go heap), so there it is the process's resident
// set where the OS gives it cheaply (Linux's /proc), else the weights plus the prefix cache and
// the Go heap: what the engine allocated, if not what the OS has paged in.
func modelMemory(backend string, weights int64, r *runner.Runner) func() int64 {
	if backend == "metal" {
		return func() int64 {
			dev, err := mtl.DefaultDevice() // the process's one device, the backend's too
			if err != nil {
				return 0
			}
			defer dev.Release()
			return int64(dev.CurrentAllocatedSize())
		}
	}
	return func() int64 {
		if n, ok := residentSet(); ok {
			return n
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return weights + r.Cache().Stats().Bytes + int64(ms.HeapInuse)
	}
}

// residentSet is the process's resident memory from /proc/self/statm (Linux).
func residentSet() (int64, bool) {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()), err == nil
}

// weightBytes is the size of the checkpoint's weights on disk, as model listings show it.
func weightBytes(dir string) int64 {
	var n int64
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// parameterCount is the model's size as listings name it: known for the production model only.
func parameterCount(cfg *config.Config) string {
	if cfg.Profile == config.ProfileProduction {
		return "35B"
	}
	return ""
}

// openDiskCache opens the prefix cache's disk tier for the checkpoint in dir on b (nil when
// disabled): under the user cache directory, its files named by the checkpoint's identity.
// snapshotFormat names the snapshot files' layout in the disk cache's identity, so files of an
// older layout are foreign (not read): "delta" snapshots end with the rotary delta images leave.
const snapshotFormat = "delta"

func openDiskCache(o serveOptions, dir string, b backend.Backend) (*prefixcache.Disk, error) {
	if o.diskCacheGB == 0 || o.cacheMB == 0 {
		return nil, nil
	}
	if _, ok := b.(backend.Persistent); !ok {
		return nil, nil
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(cfg)
	id := prefixcache.Identity{Model: dir, Config: hex.EncodeToString(sum[:]), Backend: fmt.Sprintf("%s kv%d %s", b.Name(), cmp.Or(o.kvBits, 16), snapshotFormat)}
	if m, err := hub.ReadMarker(dir); err == nil {
		id.Model = m.Repo + "@" + m.Revision
	}
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	return prefixcache.OpenDisk(filepath.Join(root, "lily", "prefix-cache"), int64(o.diskCacheGB*(1<<30)), id)
}

// demoDir builds (once) the demo checkpoint in the user cache directory.
func demoDir() (string, error) {
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		return "", err
	}
	tok, err := tokenizer.LoadJSON(raw)
	if err != nil {
		return "", err
	}
	var eos []int
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(s); ok {
			eos = append(eos, id)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return demo.Ensure(filepath.Join(cache, "lily"), demo.Files{
		TokenizerJSON: raw, ChatTemplate: []byte(chat.BuiltinSource()), VocabSize: tok.VocabSize(), EOSTokenIDs: eos,
		VisionTokens: demoVisionTokens(tok),
	})
}

// demoVisionTokens are the tokenizer's image pad, video pad, vision start and end ids, which give
// the demo model its vision tower (none when the tokenizer lacks one of them).
func demoVisionTokens(tok *tokenizer.Tokenizer) [4]int {
	var ids [4]int
	for i, s := range []string{"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"} {
		id, ok := tok.TokenID(s)
		if !ok {
			return [4]int{}
		}
		ids[i] = id
	}
	return ids
}

// prefillRouteOf says which route a backend's batched prefill takes and why ("tensor: …"), for
// /status; "" for a backend without one (cpu).
func prefillRouteOf(d backend.Description) string {
	if d.PrefillRoute == "" {
		return ""
	}
	return d.PrefillRoute + ": " + d.PrefillRouteWhy
}
