package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/tokenizer"
)

type tokenizeOptions struct {
	tokenizer, text, textFile, output string
}

// tokenizeOutput is the stable JSON contract of `lily tokenize --output json`.
type tokenizeOutput struct {
	IDs []int `json:"ids"`
}

func newTokenizeCmd() *cobra.Command {
	var o tokenizeOptions
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer FILE (--text TEXT | --text-file F)",
		Short: "Encode text to token ids (no special tokens added; <|im_start|> etc. in the text are matched)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTokenize(cmd, o, cmd.Flags().Changed("text"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json, .json.gz, or a directory holding tokenizer.json")
	f.StringVar(&o.text, "text", "", "text to encode")
	f.StringVar(&o.textFile, "text-file", "", "file whose contents to encode (- for standard input)")
	f.StringVar(&o.output, "output", "json", `json ({"ids": [...]}) or text (comma-separated ids)`)
	return cmd
}

func runTokenize(cmd *cobra.Command, o tokenizeOptions, haveText bool) error {
	if o.output != "json" && o.output != "text" {
		return fmt.Errorf("--output %q: expected json or text", o.output)
	}
	if haveText == (o.textFile != "") {
		return fmt.Errorf("give exactly one of --text and --text-file")
	}
	text := o.text
	if o.textFile != "" {
		var raw []byte
		var err error
		if o.textFile == "-" {
			raw, err = io.ReadAll(cmd.InOrStdin())
		} else {
			raw, err = os.ReadFile(o.textFile)
		}
		if err != nil {
			return fmt.Errorf("--text-file: %w", err)
		}
		text = string(raw)
	}
	tok, err := loadTokenizer(o.tokenizer)
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	if o.output == "text" {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.Itoa(id)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(s, ","))
		return err
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(tokenizeOutput{IDs: ids})
}

func newDetokenizeCmd() *cobra.Command {
	var tokPath, ids string
	cmd := &cobra.Command{
		Use:   "detokenize --tokenizer FILE --ids 1,2,3",
		Short: "Decode token ids to text (printed as is, no newline added)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := loadTokenizer(tokPath)
			if err != nil {
				return err
			}
			list, err := parseTokenIDs(ids, tok.VocabSize())
			if err != nil {
				return err
			}
			for _, id := range list {
				if _, ok := tok.Token(id); !ok {
					return fmt.Errorf("--ids: token id %d is not defined by the tokenizer", id)
				}
			}
			_, err = io.WriteString(cmd.OutOrStdout(), tok.Decode(list))
			return err
		},
	}
	cmd.Flags().StringVar(&tokPath, "tokenizer", "", "tokenizer.json, .json.gz, or a directory holding tokenizer.json")
	cmd.Flags().StringVar(&ids, "ids", "", "comma-separated token ids")
	return cmd
}

func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if path == "" {
		return nil, fmt.Errorf("--tokenizer FILE is required")
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	return tokenizer.Load(path)
}

// parseTokenIDs parses "1, 2,3" and rejects ids outside [0, vocab).
func parseTokenIDs(s string, vocab int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return []int{}, nil
	}
	var ids []int
	for i, part := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--ids: item %d (%q) is not a token id", i+1, part)
		}
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("--ids: token id %d outside the vocabulary [0, %d)", id, vocab)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
