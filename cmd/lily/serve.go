package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/demo"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/resources"
	"github.com/lilyformac/lily/server"
)

type serveOptions struct {
	model, backend, host, apiKey, cors   string
	port, ctx, queue, cacheMB, maxBodyMB int
	demo, insecure                       bool
	timeout                              time.Duration
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--model DIR | --demo]",
		Short: "Serve the model on an OpenAI-compatible HTTP API",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runServe(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "checkpoint directory")
	f.BoolVar(&o.demo, "demo", false, "serve the built-in tiny demo model (random weights, real tokenizer and chat template)")
	f.StringVar(&o.backend, "backend", "cpu", "executor: cpu")
	f.StringVar(&o.host, "host", "127.0.0.1", "address to bind (anything but loopback needs --api-key)")
	f.IntVar(&o.port, "port", 8000, "port")
	f.StringVar(&o.apiKey, "api-key", os.Getenv("LILY_API_KEY"), "require this bearer key (default $LILY_API_KEY)")
	f.BoolVar(&o.insecure, "insecure", false, "allow a non-loopback bind without an API key")
	f.IntVar(&o.ctx, "ctx", 0, "context length in tokens (default: the model's)")
	f.StringVar(&o.cors, "cors", "", "comma-separated allowed browser origins, or *")
	f.IntVar(&o.queue, "queue", 16, "requests that may wait while one generates (more get 429)")
	f.IntVar(&o.cacheMB, "cache-mb", 4096, "prefix-cache memory budget in MiB (0 disables)")
	f.IntVar(&o.maxBodyMB, "max-body-mb", 16, "largest request body in MiB")
	f.DurationVar(&o.timeout, "request-timeout", 30*time.Minute, "per-request time limit")
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

func runServe(cmd *cobra.Command, o serveOptions) error {
	if !isLoopback(o.host) && o.apiKey == "" && !o.insecure {
		return fmt.Errorf("--host %s exposes the server beyond this machine: set --api-key (or $LILY_API_KEY), or pass --insecure to allow it without one", o.host)
	}
	if o.port < 0 || o.port > 65535 {
		return fmt.Errorf("--port %d: expected 0..65535", o.port)
	}
	m, closeModel, err := loadServedModel(o)
	if err != nil {
		return err
	}
	defer closeModel()
	var origins []string
	for _, s := range strings.Split(o.cors, ",") {
		if s = strings.TrimSpace(s); s != "" {
			origins = append(origins, s)
		}
	}
	srv := server.New(server.Config{
		APIKey: o.apiKey, CORSOrigins: origins, MaxBodyBytes: int64(o.maxBodyMB) << 20,
		QueueLimit: o.queue, RequestTimeout: o.timeout,
	})
	srv.SetModel(m)
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		var se *os.SyscallError
		if errors.As(err, &se) && errors.Is(se.Err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d is already in use: stop the other server or pass --port", o.port)
		}
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.ErrOrStderr(), "lily: serving %s (context %d) at http://%s/v1\n", m.ID, m.Context, ln.Addr())
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return hs.Shutdown(shutdown)
	}
}

// loadServedModel opens the checkpoint (or builds the demo one) with its tokenizer and template.
func loadServedModel(o serveOptions) (*server.Model, func(), error) {
	dir, id := o.model, ""
	switch {
	case o.demo && o.model != "":
		return nil, nil, errors.New("--demo and --model are exclusive")
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
	b, w, err := openBackend(o.backend, dir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	tmpl, err := chat.Load(dir)
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	ctxLen := w.Config.MaxPositions
	if o.ctx > 0 {
		if ctxLen > 0 && o.ctx > ctxLen {
			w.Close()
			return nil, nil, fmt.Errorf("--ctx %d exceeds the model's %d positions", o.ctx, ctxLen)
		}
		ctxLen = o.ctx
	}
	stops := slices.Clone(w.Config.EOSTokenIDs)
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(s); ok && !slices.Contains(stops, id) {
			stops = append(stops, id)
		}
	}
	m := &server.Model{
		ID:        id,
		Runner:    runner.New(b, runner.Options{CacheBytes: int64(o.cacheMB) << 20, Context: ctxLen}),
		Tokenizer: server.TokenizerOf(tok),
		Template:  server.TemplateOf(tmpl),
		StopIDs:   stops,
		Context:   ctxLen,
	}
	return m, func() { w.Close() }, nil
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
	})
}
