package e2e

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
)

// sdkErrorsConfig is gatewayConfig with a team whose token window no
// request with a large max_tokens fits.
const sdkErrorsConfig = gatewayConfig + `  - name: tight
    models: ["gpt-4o-mini", "claude-*"]
    limits: {tokens: {total: {per_minute: 100}}}
`

// unknownSluiceKey is well-formed, and no key of the gateway.
const unknownSluiceKey = "sk-sluice-UNKNOWN789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh"

// TestSDKTypedErrors: every refusal Sluice or Envoy answers in Sluice's
// place surfaces, through Envoy, as the official SDK's own typed error —
// openai-go's *openai.Error and anthropic-sdk-go's *anthropic.Error — with
// the status, type, code and param the provider gives the same refusal:
// an unknown key, a model the key may not use, a model that does not
// exist, a full request window (its retry-after readable from the
// error's response) and a full token window, a body over the gateway's
// limit (Sluice's 413 just over it, Envoy's past the listener's buffer),
// and max_tokens -1.
func TestSDKTypedErrors(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, sdkErrorsConfig)
	_, key := s.createKey(t, "apps")
	_, tight := s.createKey(t, "tight")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	const mib = 1 << 20
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		oc, ac := sdkClients(p.url, key)
		chat := func(c openai.Client, model, content string, maxTokens int64) error {
			params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}}
			if maxTokens != 0 {
				params.MaxTokens = openai.Int(maxTokens)
			}
			_, err := c.Chat.Completions.New(ctx, params)
			return err
		}
		message := func(c anthropic.Client, model, content string, maxTokens int64) error {
			_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: maxTokens,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(content))}})
			return err
		}
		// openAIError checks err is the SDK's typed error with the
		// provider's fields; message, when set, is a prefix the message
		// must have.
		openAIError := func(t *testing.T, err error, status int, typ, code, param, message string) *openai.Error {
			t.Helper()
			var e *openai.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *openai.Error", err, err)
			}
			if e.StatusCode != status || e.Type != typ || e.Code != code || e.Param != param || !strings.HasPrefix(e.Message, message) {
				t.Errorf("openai error %d type %q code %q param %q %q\nwant %d type %q code %q param %q %q…", e.StatusCode, e.Type, e.Code, e.Param, e.Message, status, typ, code, param, message)
			}
			if !strings.HasPrefix(e.Response.Header.Get("content-type"), "application/json") {
				t.Errorf("content-type %q", e.Response.Header.Get("content-type"))
			}
			return e
		}
		anthropicError := func(t *testing.T, err error, status int, typ, message string) *anthropic.Error {
			t.Helper()
			var e *anthropic.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *anthropic.Error", err, err)
			}
			if e.StatusCode != status || string(e.Type()) != typ || !strings.HasPrefix(e.Message, message) {
				t.Errorf("anthropic error %d type %q %q (%s)\nwant %d type %q %q…", e.StatusCode, e.Type(), e.Message, e.RawJSON(), status, typ, message)
			}
			if e.Response.Header.Get("content-type") != "application/json" {
				t.Errorf("content-type %q", e.Response.Header.Get("content-type"))
			}
			return e
		}

		t.Run("unknown key", func(t *testing.T) {
			bad, badA := sdkClients(p.url, unknownSluiceKey)
			// OpenAI's redaction: the first 8 and last 4 characters.
			k := unknownSluiceKey
			e := openAIError(t, chat(bad, "gpt-4o-mini", "hi", 0), 401, "invalid_request_error", "invalid_api_key", "",
				"Incorrect API key provided: "+k[:8]+strings.Repeat("*", len(k)-12)+k[len(k)-4:]+". ")
			if strings.Contains(e.Message, unknownSluiceKey[8:len(unknownSluiceKey)-4]) {
				t.Errorf("the message echoes more of the key than OpenAI does: %q", e.Message)
			}
			anthropicError(t, message(badA, "claude-sonnet-4", "hi", 16), 401, "authentication_error", "invalid x-api-key")
		})
		t.Run("model not allowed", func(t *testing.T) {
			openAIError(t, chat(oc, "gpt-4o", "hi", 0), 403, "invalid_request_error", "model_not_found", "",
				"API key `")
			anthropicError(t, message(ac, "gpt-4o", "hi", 16), 403, "permission_error",
				"Your API key does not have permission to use the specified resource.")
		})
		t.Run("model not found", func(t *testing.T) {
			openAIError(t, chat(oc, "gpt-9", "hi", 0), 404, "invalid_request_error", "model_not_found", "",
				"The model `gpt-9` does not exist or you do not have access to it.")
			anthropicError(t, message(ac, "claude-9", "hi", 16), 404, "not_found_error", "model: claude-9")
		})
		t.Run("max_tokens -1", func(t *testing.T) {
			openAIError(t, chat(oc, "gpt-4o-mini", "hi", -1), 400, "invalid_request_error", "integer_below_min_value", "max_tokens",
				"Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got -1 instead.")
			anthropicError(t, message(ac, "claude-sonnet-4", "hi", -1), 400, "invalid_request_error", `"max_tokens" must be a non-negative integer`)
		})
		t.Run("body too large", func(t *testing.T) {
			// Just over Sluice's limit (4 MiB), within the listener's
			// buffer, and past it: the SDKs send a content-length, so
			// Sluice refuses either at the request headers.
			for _, n := range []int{4*mib + 1024, 5 * mib} {
				big := strings.Repeat("x", n)
				openAIError(t, chat(oc, "gpt-4o-mini", big, 0), 413, "invalid_request_error", "body_too_large", "", "the request body is ")
				anthropicError(t, message(ac, "claude-sonnet-4", big, 16), 413, "request_too_large", "Request exceeds the maximum size (")
			}
		})
		t.Run("token window", func(t *testing.T) {
			to, ta := sdkClients(p.url, tight)
			openAIError(t, chat(to, "gpt-4o-mini", "hi", 1000), 429, "tokens", "rate_limit_exceeded", "", "")
			anthropicError(t, message(ta, "claude-sonnet-4", "hi", 1000), 429, "rate_limit_error", "")
		})
	})
}

// TestSDKRateLimitRetryAfter: a key's full request window surfaces as each
// SDK's typed 429 — OpenAI's type requests and code rate_limit_exceeded,
// Anthropic's rate_limit_error — whose response carries retry-after in
// whole seconds, what an SDK's retry waits for.
func TestSDKRateLimitRetryAfter(t *testing.T) {
	_, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		// createKey's readiness check is an ext_authz Check, which counts:
		// the window holds it and the first request.
		_, key := s.createKey(t, "apps", "--rpm", "2")
		oc, ac := sdkClients(p.url, key)
		params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		if _, err := oc.Chat.Completions.New(ctx, params); err != nil {
			t.Fatalf("the first request: %v", err)
		}
		retryAfter := func(t *testing.T, h string) {
			t.Helper()
			if n, err := strconv.Atoi(h); err != nil || n < 1 || n > 61 {
				t.Errorf("retry-after %q, want whole seconds in [1, 61]", h)
			}
		}
		_, err := oc.Chat.Completions.New(ctx, params)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Type != "requests" || oe.Code != "rate_limit_exceeded" || oe.Param != "" ||
			!strings.HasPrefix(oe.Message, "Rate limit reached for key ") {
			t.Fatalf("the second request: %v %+v, want the SDK's 429 rate_limit_exceeded", err, oe)
		}
		retryAfter(t, oe.Response.Header.Get("retry-after"))

		_, err = ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4", MaxTokens: 16,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Type() != anthropic.ErrorTypeRateLimitError {
			t.Fatalf("the Anthropic request: %v, want the SDK's 429 rate_limit_error", err)
		}
		retryAfter(t, ae.Response.Header.Get("retry-after"))
	})
}
