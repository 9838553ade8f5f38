package server

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/grammar"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/resources"
)

var (
	tokOnce sync.Once
	qwenTok *tokenizer.Tokenizer
)

// testTokenizer is the real Qwen3 tokenizer the demo model ships with.
func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	tokOnce.Do(func() {
		raw, err := resources.DemoTokenizerJSON()
		if err != nil {
			panic(err)
		}
		if qwenTok, err = tokenizer.LoadJSON(raw); err != nil {
			panic(err)
		}
	})
	return qwenTok
}

// scripted is a backend whose model "says" a fixed token script after any prompt: each forward
// puts nearly all probability on the next scripted token (then repeats its last token).
type scripted struct {
	cfg      *config.Config
	script   []int
	forwards atomic.Int64
	delay    time.Duration // per forward call, to make generations slow
	gate     chan struct{} // when set, every forward waits for a value
}

func (b *scripted) Name() string                { return "scripted" }
func (b *scripted) Config() *config.Config      { return b.cfg }
func (b *scripted) NewSession() backend.Session { return &scriptSession{b: b} }
func (b *scripted) Describe() backend.Description {
	return backend.Description{Name: b.Name(), Context: b.cfg.MaxPositions}
}
func (b *scripted) StepRows(rows []backend.Row) []backend.RowResult { return backend.StepEach(rows) }
func (b *scripted) Batched() (steps, rows int64)                    { return 0, 0 }
func (b *scripted) Fits([]int) bool                                 { return true }
func (b *scripted) EncodeImage(*vision.Pixels) ([][]float32, error) {
	return nil, errors.New("scripted: no vision tower")
}

type scriptSession struct {
	b      *scripted
	pos    int
	prompt int // tokens fed before the first generated one: set at the first single-token call
	out    int // scripted tokens already consumed
}

func (s *scriptSession) Forward(tokens []int, all bool) ([][]float32, error) {
	s.b.forwards.Add(1)
	if s.b.delay > 0 {
		time.Sleep(s.b.delay)
	}
	if s.b.gate != nil {
		<-s.b.gate
	}
	if len(tokens) == 1 && s.pos > 0 && s.prompt > 0 {
		s.out++
	}
	s.pos += len(tokens)
	if s.prompt == 0 {
		s.prompt = s.pos
	}
	next := s.b.script[min(s.out, len(s.b.script)-1)]
	row := make([]float32, s.b.cfg.VocabSize)
	row[next] = 60
	return [][]float32{row}, nil
}

func (s *scriptSession) ForwardImages(tokens []int, _ []backend.Image, all bool) ([][]float32, error) {
	return s.Forward(tokens, all)
}

func (s *scriptSession) Pos() int { return s.pos }
func (s *scriptSession) Save() (backend.Snapshot, error) {
	c := *s
	return scriptSnapshot{&c}, nil
}
func (s *scriptSession) Close() {}

type scriptSnapshot struct{ s *scriptSession }

func (sn scriptSnapshot) Pos() int     { return sn.s.pos }
func (sn scriptSnapshot) Bytes() int64 { return 64 }
func (sn scriptSnapshot) Close()       {}
func (sn scriptSnapshot) Restore() (backend.Session, error) {
	c := *sn.s
	return &c, nil
}

// newScripted builds a backend that answers with text followed by <|im_end|>.
func newScripted(t testing.TB, text string) *scripted {
	tok := testTokenizer(t)
	end, _ := tok.TokenID("<|im_end|>")
	script := append(tok.Encode(text), end)
	return &scripted{cfg: &config.Config{VocabSize: tok.VocabSize() + 31, MaxPositions: 4096}, script: script}
}

// testServer serves b with the real tokenizer and the built-in Qwen3.6 template.
func testServer(t testing.TB, b *scripted, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	tok := testTokenizer(t)
	end, _ := tok.TokenID("<|im_end|>")
	eot, _ := tok.TokenID("<|endoftext|>")
	s := New(cfg)
	s.SetModel(&Model{
		ID:        "test-model",
		Runner:    runner.New(b, runner.Options{CacheBytes: 64 << 20, Context: b.cfg.MaxPositions}),
		Tokenizer: TokenizerOf(tok),
		Template:  TemplateOf(chat.Builtin()),
		StopIDs:   []int{end, eot},
		Context:   b.cfg.MaxPositions,
		Vocab: sync.OnceValues(func() (*grammar.Vocab, error) {
			return grammar.VocabFromTokenizer(tok, b.cfg.VocabSize, []int{end, eot})
		}),
	})
	return s, startHTTP(t, s)
}

// startHTTP serves s on a loopback port with the http.Server settings lily serve uses.
func startHTTP(t testing.TB, s *Server) *httptest.Server {
	ts := httptest.NewUnstartedServer(s)
	ts.Config = s.HTTPServer()
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func newHTTPTest(t testing.TB, s *Server) string { return startHTTP(t, s).URL }

// checkPrompt fails t unless prompt (the ids a generation was asked for) is what the OpenAI chat
// conversation same renders to with tools and the generation prompt: a dialect's request became
// its OpenAI equivalent.
func checkPrompt(t *testing.T, prompt []int, same, tools string) {
	t.Helper()
	want, err := chat.Builtin().Render(chat.Request{Messages: json.RawMessage(same), Tools: json.RawMessage(tools), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := testTokenizer(t).Decode(prompt); got != want {
		t.Fatalf("prompt\n%q\nwant\n%q", got, want)
	}
}
