package e2e

import (
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
)

// sdkClients are the official SDKs pointed at the proxy, with retries off
// so that every call is one request and a refusal surfaces at once.
func sdkClients(base, key string) (openai.Client, anthropic.Client) {
	hc := &http.Client{}
	oc := openai.NewClient(openaioption.WithBaseURL(base+"/v1/"), openaioption.WithAPIKey(key),
		openaioption.WithMaxRetries(0), openaioption.WithHTTPClient(hc))
	ac := anthropic.NewClient(anthropicoption.WithBaseURL(base+"/"), anthropicoption.WithAPIKey(key),
		anthropicoption.WithMaxRetries(0), anthropicoption.WithHTTPClient(hc))
	return oc, ac
}

// TestOfficialSDKs: the official OpenAI and Anthropic Go SDKs, as a
// user's code calls them, get through Envoy and Sluice to the provider
// and read its answer; a key Sluice does not know surfaces as each SDK's
// typed 401 error.
func TestOfficialSDKs(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		oc, ac := sdkClients(p.url, key)
		chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		})
		if err != nil || len(chat.Choices) == 0 || chat.Choices[0].Message.Content == "" || chat.Usage.TotalTokens == 0 {
			t.Fatalf("chat: %v %+v", err, chat)
		}
		msg, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "claude-sonnet-4",
			MaxTokens: 16,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
		})
		if err != nil || len(msg.Content) == 0 || msg.Usage.OutputTokens == 0 {
			t.Fatalf("messages: %v %+v", err, msg)
		}

		bad, badA := sdkClients(p.url, "sk-unknown")
		_, err = bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		})
		var oerr *openai.Error
		if !errors.As(err, &oerr) || oerr.StatusCode != 401 {
			t.Errorf("chat with an unknown key: %v, want the SDK's 401 error", err)
		}
		_, err = badA.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "claude-sonnet-4",
			MaxTokens: 16,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
		})
		var aerr *anthropic.Error
		if !errors.As(err, &aerr) || aerr.StatusCode != 401 {
			t.Errorf("messages with an unknown key: %v, want the SDK's 401 error", err)
		}
	})
}
