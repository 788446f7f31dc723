package apierr

import (
	"testing"

	"github.com/sluicegw/sluice/internal/llmapi"
)

const (
	OpenAI    = llmapi.OpenAI
	Anthropic = llmapi.Anthropic
)

func TestBody(t *testing.T) {
	tests := []struct {
		d      llmapi.Dialect
		status int
		code   string
		msg    string
		want   string
	}{
		{OpenAI, 401, "unknown_key", "unknown API key sk-sluice-abc123", `{"error":{"message":"unknown API key sk-sluice-abc123","type":"authentication_error","param":null,"code":"unknown_key"}}`},
		{OpenAI, 429, "rate_limited", `a "quoted" <message>`, `{"error":{"message":"a \"quoted\" \u003cmessage\u003e","type":"rate_limit_error","param":null,"code":"rate_limited"}}`},
		{OpenAI, 429, "insufficient_quota", "m", `{"error":{"message":"m","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{Anthropic, 429, "insufficient_quota", "m", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{OpenAI, 403, "revoked_key", "m", `{"error":{"message":"m","type":"permission_error","param":null,"code":"revoked_key"}}`},
		{OpenAI, 500, "internal_error", "m", `{"error":{"message":"m","type":"server_error","param":null,"code":"internal_error"}}`},
		{Anthropic, 401, "unknown_key", "m", `{"type":"error","error":{"type":"authentication_error","message":"m"}}`},
		{Anthropic, 403, "expired_key", "m", `{"type":"error","error":{"type":"permission_error","message":"m"}}`},
		{Anthropic, 429, "rate_limited", "m", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{Anthropic, 413, "body_too_large", "m", `{"type":"error","error":{"type":"request_too_large","message":"m"}}`},
		{Anthropic, 502, "upstream", "m", `{"type":"error","error":{"type":"api_error","message":"m"}}`},
	}
	for _, tt := range tests {
		if got := string(Body(tt.d, tt.status, tt.code, tt.msg)); got != tt.want {
			t.Errorf("Body(%v, %d) =\n %s\nwant\n %s", tt.d, tt.status, got, tt.want)
		}
	}
}
