package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/tokens"
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

// TestSDKCountTokens: Anthropic's Messages.CountTokens goes through
// Sluice to the provider, which receives Sluice's credential and the
// upstream model name. (Each SDK's models.list() and models.get():
// TestSDKModels.)
func TestSDKCountTokens(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps", "--models", "mini,claude-*")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		mock.Reset()
		_, ac := sdkClients(p.url, key)
		count, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
			Model:    "claude-sonnet-4",
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello there"))},
		})
		if err != nil || count.InputTokens <= 0 {
			t.Fatalf("count_tokens: %+v, %v", count, err)
		}
		rec := mock.Received()
		if len(rec) != 1 || rec[0].Path != "/v1/messages/count_tokens" || rec[0].Header.Get("X-Api-Key") != anthropicKey ||
			!strings.Contains(string(rec[0].Body), `"claude-sonnet-4-20250514"`) {
			t.Errorf("the provider received %+v, want one count_tokens with Sluice's key and the upstream model", rec)
		}
	})
}

// TestOfficialSDKEndpoints: each metered endpoint the Go SDKs call —
// chat streamed with include_usage, Responses plain and streamed,
// embeddings, Anthropic messages streamed — reads the provider's answer
// through Envoy and Sluice, and the spend record of each call holds the
// usage the SDK reported.
func TestOfficialSDKEndpoints(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	type reported struct {
		endpoint, model string
		in, out         int64
	}
	var want []reported
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		oc, ac := sdkClients(p.url, key)
		hello := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}

		cs := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: hello,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		for cs.Next() {
			acc.AddChunk(cs.Current())
		}
		if err := cs.Err(); err != nil || len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" || acc.Usage.TotalTokens == 0 {
			t.Fatalf("chat stream with include_usage: %v %+v", err, acc.ChatCompletion)
		}
		want = append(want, reported{"chat_completions", "gpt-4o-mini", acc.Usage.PromptTokens, acc.Usage.CompletionTokens})

		r, err := oc.Responses.New(ctx, responses.ResponseNewParams{
			Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		})
		if err != nil || r.OutputText() == "" || r.Usage.TotalTokens == 0 {
			t.Fatalf("responses: %v %+v", err, r)
		}
		want = append(want, reported{"responses", "gpt-4o-mini", r.Usage.InputTokens, r.Usage.OutputTokens})

		rs := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: "gpt-4o-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		})
		var text string
		var completed *responses.Response
		for rs.Next() {
			switch ev := rs.Current(); ev.Type {
			case "response.output_text.delta":
				text += ev.Delta
			case "response.completed":
				c := ev.AsResponseCompleted().Response
				completed = &c
			}
		}
		if err := rs.Err(); err != nil || text == "" || completed == nil || completed.Usage.TotalTokens == 0 {
			t.Fatalf("responses stream: %v text %q completed %+v", err, text, completed)
		}
		want = append(want, reported{"responses", "gpt-4o-mini", completed.Usage.InputTokens, completed.Usage.OutputTokens})

		e, err := oc.Embeddings.New(ctx, openai.EmbeddingNewParams{
			Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
		})
		if err != nil || len(e.Data) == 0 || len(e.Data[0].Embedding) == 0 || e.Usage.PromptTokens == 0 {
			t.Fatalf("embeddings: %v %+v", err, e)
		}
		want = append(want, reported{"embeddings", "text-embedding-3-small", e.Usage.PromptTokens, 0})

		ms := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
			Model: "claude-sonnet-4", MaxTokens: 32,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
		})
		var msg anthropic.Message
		for ms.Next() {
			if err := msg.Accumulate(ms.Current()); err != nil {
				t.Fatalf("messages stream: %v", err)
			}
		}
		if err := ms.Err(); err != nil || len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.Usage.OutputTokens == 0 {
			t.Fatalf("messages stream: %v %+v", err, msg)
		}
		in := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens + msg.Usage.CacheCreationInputTokens
		want = append(want, reported{"messages", "claude-sonnet-4", in, msg.Usage.OutputTokens})
	})
	var got []reported
	for _, r := range s.records(t) {
		got = append(got, reported{r.Endpoint, r.Model, r.Tokens[tokens.Input], r.Tokens[tokens.Output]})
	}
	slices.SortFunc(got, func(a, b reported) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	slices.SortFunc(want, func(a, b reported) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if !slices.Equal(got, want) {
		t.Errorf("spend records %+v, want what the SDKs reported %+v", got, want)
	}
}

// TestSDKProviderHeaders: through each proxy, the official SDKs get the
// provider's x-request-id unchanged (the id the provider's support asks
// for) and the gateway's own in x-sluice-request-id, which names the
// spend record (client_request_id); no response header naming the
// gateway's provider account reaches them; and no provider receives
// Envoy's x-envoy-attempt-count.
func TestSDKProviderHeaders(t *testing.T) {
	account := http.Header{
		"Openai-Organization": {"org-gateway"}, "Openai-Project": {"proj_gateway"},
		"Anthropic-Organization-Id": {"00000000-gateway"},
	}
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey, ResponseHeaders: account})
	s := startSluice(t, gatewayConfig)
	_, key := s.createKey(t, "apps")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		oc, ac := sdkClients(p.url, key)
		var or, ar *http.Response
		chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
		}, openaioption.WithResponseInto(&or))
		if err != nil || len(chat.Choices) == 0 {
			t.Fatalf("chat: %v %+v", err, chat)
		}
		if _, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "claude-sonnet-4",
			MaxTokens: 16,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
		}, anthropicoption.WithResponseInto(&ar)); err != nil {
			t.Fatalf("messages: %v", err)
		}
		for name, r := range map[string]*http.Response{"openai": or, "anthropic": ar} {
			// The mock's OpenAI ids are req_mock…, Envoy's UUIDs;
			// Anthropic's id is request-id, which nothing touched.
			if got := r.Header.Get("x-request-id"); name == "openai" && !strings.HasPrefix(got, "req_mock") {
				t.Errorf("%s: x-request-id %q, want the provider's (req_mock…)", name, got)
			}
			for k := range account {
				if v := r.Header.Values(k); len(v) > 0 {
					t.Errorf("%s: the client got %s: %q", name, k, v)
				}
			}
			id := r.Header.Get("x-sluice-request-id")
			if id == "" || strings.HasPrefix(id, "req_mock") {
				t.Fatalf("%s: x-sluice-request-id %q, want the gateway's id", name, id)
			}
			if rec := s.awaitRecord(t, id); rec.ClientRequestID != id {
				t.Errorf("%s: record client_request_id %q, want %q", name, rec.ClientRequestID, id)
			}
		}
		for _, r := range mock.Received() {
			if v := r.Header.Values("x-envoy-attempt-count"); len(v) > 0 {
				t.Errorf("the provider received x-envoy-attempt-count %q on %s", v, r.Path)
			}
		}
	})
}
