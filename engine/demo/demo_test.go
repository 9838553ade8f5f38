package demo

import (
	"image"
	"os"
	"path/filepath"
	"testing"

	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/vision"
)

func TestEnsureBuildsALoadableCheckpointOnce(t *testing.T) {
	root := t.TempDir()
	f := Files{TokenizerJSON: []byte(`{"fake": true}`), ChatTemplate: []byte("{{ messages }}"), VocabSize: 1000, EOSTokenIDs: []int{998, 999}}
	dir, err := Ensure(root, f)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Config.VocabSize != 1024 || len(w.Config.EOSTokenIDs) != 2 {
		t.Fatalf("vocab %d eos %v", w.Config.VocabSize, w.Config.EOSTokenIDs)
	}
	m := cpu.New(w)
	out, err := m.Forward(m.NewState(), []int{1, 2, 3, 999}, false)
	if err != nil || len(out[0]) != 1024 {
		t.Fatalf("forward: %v", err)
	}
	for _, name := range []string{"tokenizer.json", "chat_template.jinja"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); len(b) == 0 {
			t.Errorf("%s missing", name)
		}
	}
	st, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
	again, err := Ensure(root, f)
	if err != nil || again != dir {
		t.Fatalf("second Ensure: %q %v", again, err)
	}
	st2, _ := os.Stat(filepath.Join(dir, "model.safetensors"))
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("checkpoint rebuilt although the inputs did not change")
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Fatalf("leftover build directories: %v", entries)
	}
}

// TestDemoVisionTower: with the tokenizer's vision ids the demo gets a tower in the pinned
// checkpoint's layout, which the loader reads and the CPU reference runs on an image's rows.
func TestDemoVisionTower(t *testing.T) {
	f := Files{TokenizerJSON: []byte(`{"fake": true}`), ChatTemplate: []byte("{{ messages }}"), VocabSize: 1000, EOSTokenIDs: []int{998},
		VisionTokens: [4]int{990, 991, 992, 993}}
	dir, err := Ensure(t.TempDir(), f)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	v := w.Config.Vision
	if v == nil || w.Vision == nil || w.Vision.Prefix != "vision_tower." || w.Vision.PatchStoredAs != "mlx" || v.ImageToken != 990 {
		t.Fatalf("vision config %+v, weights loaded %v (%s)", v, w.Vision != nil, w.Config.VisionOff)
	}
	proc, err := vision.LoadProcessor(dir, v)
	if err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 64, 96))
	px, err := proc.Pixels(img)
	if err != nil {
		t.Fatal(err)
	}
	m := cpu.New(w)
	rows, err := m.EncodeImage(px)
	if err != nil || len(rows) != px.Tokens() || len(rows[0]) != w.Config.HiddenSize {
		t.Fatalf("encode: %d rows (want %d), %v", len(rows), px.Tokens(), err)
	}
}
