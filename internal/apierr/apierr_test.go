package apierr

import (
	"errors"
	"fmt"
	"testing"
	"time"

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
		param  string
		want   string
	}{
		{OpenAI, 401, "unknown_key", "unknown API key sk-sluice-abc123", "", `{"error":{"message":"unknown API key sk-sluice-abc123","type":"authentication_error","param":null,"code":"unknown_key"}}`},
		{OpenAI, 429, "rate_limited", `a "quoted" <message>`, "", `{"error":{"message":"a \"quoted\" \u003cmessage\u003e","type":"rate_limit_error","param":null,"code":"rate_limited"}}`},
		{OpenAI, 429, "insufficient_quota", "m", "", `{"error":{"message":"m","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{Anthropic, 429, "insufficient_quota", "m", "", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{OpenAI, 403, "revoked_key", "m", "", `{"error":{"message":"m","type":"permission_error","param":null,"code":"revoked_key"}}`},
		{OpenAI, 500, "internal_error", "m", "", `{"error":{"message":"m","type":"server_error","param":null,"code":"internal_error"}}`},
		{Anthropic, 401, "unknown_key", "m", "", `{"type":"error","error":{"type":"authentication_error","message":"m"}}`},
		{Anthropic, 403, "expired_key", "m", "", `{"type":"error","error":{"type":"permission_error","message":"m"}}`},
		{Anthropic, 429, "rate_limited", "m", "", `{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`},
		{Anthropic, 413, "body_too_large", "m", "", `{"type":"error","error":{"type":"request_too_large","message":"m"}}`},
		{Anthropic, 502, "upstream", "m", "", `{"type":"error","error":{"type":"api_error","message":"m"}}`},
		{OpenAI, 400, "invalid_field", "m", "max_tokens", `{"error":{"message":"m","type":"invalid_request_error","param":"max_tokens","code":"invalid_field"}}`},
		{Anthropic, 400, "invalid_field", "m", "max_tokens", `{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`},
	}
	for _, tt := range tests {
		e := &Error{Status: tt.status, Code: tt.code, Message: tt.msg, Param: tt.param}
		if got := string(Body(tt.d, e)); got != tt.want {
			t.Errorf("Body(%v, %d) =\n %s\nwant\n %s", tt.d, tt.status, got, tt.want)
		}
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
