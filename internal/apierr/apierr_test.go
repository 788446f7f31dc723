package apierr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/llmapi"
)

const (
	OpenAI    = llmapi.OpenAI
	Anthropic = llmapi.Anthropic
)

// TestBody: each dialect's body is the provider's exact shape, with the
// provider's type and code for the same refusal (OpenAI's null code where
// OpenAI sends null) and the dialect's own message when one is set.
func TestBody(t *testing.T) {
	tests := []struct {
		d      llmapi.Dialect
		status int
		code   string
		msg    string
		param  string
		want   string
	}{
		{OpenAI, 401, "unknown_key", "unknown API key", "", `{"error":{"message":"unknown API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{OpenAI, 401, "missing_credential", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{OpenAI, 429, "rate_limited", `a "quoted" <message>`, "", `{"error":{"message":"a \"quoted\" \u003cmessage\u003e","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{OpenAI, 429, "tokens_rate_limited", "m", "", `{"error":{"message":"m","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{OpenAI, 429, "insufficient_quota", "m", "", `{"error":{"message":"m","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{Anthropic, 429, "insufficient_quota", "m", "", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{OpenAI, 403, "revoked_key", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{OpenAI, 403, "model_not_allowed", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"model_not_found"}}`},
		{OpenAI, 404, "model_not_found", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"model_not_found"}}`},
		{OpenAI, 400, "invalid_json", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{OpenAI, 400, "missing_model", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`},
		{OpenAI, 400, "invalid_field", "m", "Model", `{"error":{"message":"m","type":"invalid_request_error","param":"Model","code":"unknown_parameter"}}`},
		{OpenAI, 413, "body_too_large", "m", "", `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"body_too_large"}}`},
		{OpenAI, 500, "internal_error", "m", "", `{"error":{"message":"m","type":"server_error","param":null,"code":"internal_error"}}`},
		{OpenAI, 503, "gateway_unavailable", "m", "", `{"error":{"message":"m","type":"server_error","param":null,"code":"gateway_unavailable"}}`},
		{Anthropic, 401, "unknown_key", "m", "", `{"type":"error","error":{"type":"authentication_error","message":"m"}}`},
		{Anthropic, 403, "expired_key", "m", "", `{"type":"error","error":{"type":"permission_error","message":"m"}}`},
		{Anthropic, 404, "model_not_found", "m", "", `{"type":"error","error":{"type":"not_found_error","message":"m"}}`},
		{Anthropic, 405, "method_not_allowed", "m", "", `{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`},
		{Anthropic, 429, "rate_limited", "m", "", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{Anthropic, 413, "body_too_large", "m", "", `{"type":"error","error":{"type":"request_too_large","message":"m"}}`},
		{Anthropic, 502, "upstream", "m", "", `{"type":"error","error":{"type":"api_error","message":"m"}}`},
		{Anthropic, 529, "overloaded", "m", "", `{"type":"error","error":{"type":"overloaded_error","message":"m"}}`},
		{OpenAI, 400, "integer_below_min_value", "m", "max_tokens", `{"error":{"message":"m","type":"invalid_request_error","param":"max_tokens","code":"integer_below_min_value"}}`},
		{Anthropic, 400, "integer_below_min_value", "m", "max_tokens", `{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`},
	}
	for _, tt := range tests {
		e := &Error{Status: tt.status, Code: tt.code, Message: tt.msg, Param: tt.param}
		if got := string(Body(tt.d, e)); got != tt.want {
			t.Errorf("Body(%v, %d %s) =\n %s\nwant\n %s", tt.d, tt.status, tt.code, got, tt.want)
		}
	}
}

// TestBodyDialectMessages: each dialect's body carries its own message
// when one is set, and Sluice's otherwise.
func TestBodyDialectMessages(t *testing.T) {
	e := &Error{Status: 404, Code: CodeModelNotFound, Message: "sluice's", OpenAIMessage: "openai's", AnthropicMessage: "anthropic's"}
	if got, want := string(Body(OpenAI, e)), `{"error":{"message":"openai's","type":"invalid_request_error","param":null,"code":"model_not_found"}}`; got != want {
		t.Errorf("OpenAI body %s, want %s", got, want)
	}
	if got, want := string(Body(Anthropic, e)), `{"type":"error","error":{"type":"not_found_error","message":"anthropic's"}}`; got != want {
		t.Errorf("Anthropic body %s, want %s", got, want)
	}
	e.OpenAIMessage, e.AnthropicMessage = "", ""
	if !strings.Contains(string(Body(OpenAI, e)), `"sluice's"`) || !strings.Contains(string(Body(Anthropic, e)), `"sluice's"`) {
		t.Errorf("without dialect messages the bodies must carry Message: %s %s", Body(OpenAI, e), Body(Anthropic, e))
	}
}

// TestOpenAIWireNamesKnownCodes: the wire table lists only codes of
// codes.go, and every OpenAI code it gives is one of OpenAI's.
func TestOpenAIWireNamesKnownCodes(t *testing.T) {
	known := map[string]bool{}
	for _, c := range []string{CodeMissingCredential, CodeMalformedCredential, CodeConflictingCredentials, CodeUnknownKey,
		CodeRevokedKey, CodeExpiredKey, CodeUnknownTeam, CodeUnknownPath, CodeMethodNotAllowed, CodeInvalidJSON,
		CodeMissingModel, CodeInvalidField, CodeModelNotAllowed, CodeModelUnpriced, CodeRateLimited,
		CodeTokensRateLimited, CodeInsufficientQuota} {
		known[c] = true
	}
	openAICodes := map[string]bool{"": true, "invalid_api_key": true, "unknown_parameter": true, "model_not_found": true,
		"rate_limit_exceeded": true, "insufficient_quota": true}
	for c, w := range openAIWire {
		if !known[c] {
			t.Errorf("openAIWire lists %q, which this test does not know", c)
		}
		if !openAICodes[w.code] {
			t.Errorf("openAIWire[%q].code = %q: not a code OpenAI sends", c, w.code)
		}
	}
	if len(openAIWire) != len(known) {
		t.Errorf("openAIWire has %d codes, the test knows %d", len(openAIWire), len(known))
	}
}

func TestAsAndRetryAfter(t *testing.T) {
	e := New(429, CodeRateLimited, "retry in %ds", 2)
	e.RetryAfter = 1500 * time.Millisecond
	got, ok := As(fmt.Errorf("admit: %w", e))
	if !ok || got != e || got.Message != "retry in 2s" {
		t.Fatalf("As = %v, %v; want %v", got, ok, e)
	}
	if _, ok := As(errors.New("plain")); ok {
		t.Error("As(plain error) = ok")
	}
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {61 * time.Second, 61}} {
		if got := (&Error{RetryAfter: tt.d}).RetryAfterSeconds(); got != tt.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	if New(400, CodeInvalidJSON, "100% literal").Message != "100% literal" {
		t.Error("New without arguments must not format its message")
	}
}
