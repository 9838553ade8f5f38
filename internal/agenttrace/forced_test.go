package agenttrace

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/tokenizer"
	"github.com/lilyformac/lily/resources"
)

func demoTokenizer(t *testing.T) *tokenizer.Tokenizer {
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.LoadJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestForceRendersTheReplyAsHistory: a turn's prompt and reply are, as text, what the next
// turn's prompt starts with (its history renders the reply the same way) when no user message
// comes between (after one, the template drops the old reasoning); each reply holds its
// reasoning and its call in the template's format and ends at <|im_end|>; a turn without a
// reply is left out.
func TestForceRendersTheReplyAsHistory(t *testing.T) {
	tok := demoTokenizer(t)
	tr := Synthetic(Options{RepoFiles: 2, FileLines: 14, Turns: 10})
	tr.Turns[9].Reply = nil
	fs, err := Force(tr, chat.Builtin(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 9 || fs[8].Turn != 9 {
		t.Fatalf("%d turns forced, the last turn %d", len(fs), fs[len(fs)-1].Turn)
	}
	for i, f := range fs {
		reply := tok.Decode(f.Reply)
		var m struct {
			Reasoning string                                     `json:"reasoning_content"`
			ToolCalls []struct{ Function struct{ Name string } } `json:"tool_calls"`
		}
		json.Unmarshal(tr.Turns[i].Reply, &m)
		if !strings.HasPrefix(reply, m.Reasoning+"\n</think>\n\n") || !strings.HasSuffix(reply, "<|im_end|>") {
			t.Errorf("turn %d: reply %q", f.Turn, reply)
		}
		if len(m.ToolCalls) > 0 && !strings.Contains(reply, "<tool_call>\n<function="+m.ToolCalls[0].Function.Name+">\n") {
			t.Errorf("turn %d: no call to %s in %q", f.Turn, m.ToolCalls[0].Function.Name, reply)
		}
		if i+1 == len(fs) || strings.Contains(string(tr.Turns[i+1].Messages[0]), `"role":"user"`) {
			continue
		}
		if next := tok.Decode(fs[i+1].Prompt); !strings.HasPrefix(next, tok.Decode(f.Prompt)+reply+"\n") {
			t.Errorf("turn %d: the prompt and reply are not how turn %d's prompt starts", f.Turn, f.Turn+1)
		}
	}
}
