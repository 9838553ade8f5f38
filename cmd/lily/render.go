package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/chat"
)

// renderRequest is the part of an OpenAI chat request that shapes the prompt.
type renderRequest struct {
	Messages            json.RawMessage            `json:"messages"`
	Tools               json.RawMessage            `json:"tools"`
	ChatTemplateKwargs  map[string]json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool                      `json:"add_generation_prompt"`
	ContinueFinal       *bool                      `json:"continue_final_message"`
}

func newRenderCmd() *cobra.Command {
	var templatePath, requestPath string
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print the prompt a chat request renders to (exactly, no newline added)",
		Long: "Render a chat request's messages, tools and chat_template_kwargs with a Jinja chat template, as transformers does.\n" +
			"--template takes a template file or a checkpoint directory (default: the built-in Qwen3.6 template).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tmpl, err := loadTemplate(templatePath)
			if err != nil {
				return err
			}
			var raw []byte
			if requestPath == "-" {
				raw, err = io.ReadAll(cmd.InOrStdin())
			} else {
				raw, err = os.ReadFile(requestPath)
			}
			if err != nil {
				return err
			}
			var req renderRequest
			if err := json.Unmarshal(raw, &req); err != nil {
				return fmt.Errorf("%s: %w", requestPath, err)
			}
			// As the server renders: the conversation normalised, a final assistant message
			// continued unless the request says otherwise.
			msgs, err := chat.Normalize(req.Messages)
			if err != nil {
				return err
			}
			end, err := chat.ResolveEnding(req.AddGenerationPrompt, req.ContinueFinal, req.ChatTemplateKwargs, chat.EndsWithAssistant(msgs))
			if err != nil {
				return err
			}
			out, err := tmpl.Render(chat.Request{
				Messages:            msgs,
				Tools:               req.Tools,
				AddGenerationPrompt: end.AddGenerationPrompt,
				ContinueFinal:       end.ContinueFinal,
				Kwargs:              req.ChatTemplateKwargs,
			})
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), out)
			return err
		},
	}
	cmd.Flags().StringVar(&templatePath, "template", "", "chat template file, or checkpoint directory (default: built-in Qwen3.6)")
	cmd.Flags().StringVar(&requestPath, "request", "", `request JSON file ("-" for stdin): messages, tools, chat_template_kwargs, add_generation_prompt (default true, unless the conversation ends with an assistant message; chat_template_kwargs' wins), continue_final_message (default: whether the last message is the assistant's); the conversation is normalised as the server does (developer is system, later system messages folded into a user message)`)
	_ = cmd.MarkFlagRequired("request")
	return cmd
}

func loadTemplate(path string) (*chat.Template, error) {
	if path == "" {
		return chat.Builtin(), nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return chat.Load(path)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tmpl, err := chat.Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tmpl, nil
}
