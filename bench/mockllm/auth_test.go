package mockllm

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestCredentials(t *testing.T) {
	s, base := start(t, Options{APIKey: "sk-openai", AzureAPIKey: "az-key", AnthropicAPIKey: "sk-ant"})
	c := client(t, false)
	const azure = "/openai/deployments/dep/chat/completions?api-version=2024-10-21"
	anth := withStream(messagesBody, "")
	for _, tc := range []struct {
		name    string
		path    string
		body    string
		headers []string
		status  int
		errType string // OpenAI error code or Anthropic error type, when refused
	}{
		{"openai no key", "/v1/chat/completions", chatBody, nil, 401, "invalid_api_key"},
		{"openai wrong key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer sk-other"}, 401, "invalid_api_key"},
		{"openai not bearer", "/v1/chat/completions", chatBody, []string{"Authorization", "sk-openai"}, 401, "invalid_api_key"},
		{"openai key prefix", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer sk-open"}, 401, "invalid_api_key"},
		{"openai other dialect's key", "/v1/embeddings", `{"model":"e","input":"x"}`, []string{"X-Api-Key", "sk-openai"}, 401, "invalid_api_key"},
		{"openai ok", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer sk-openai"}, 200, ""},
		{"responses ok", "/v1/responses", responsesBody, []string{"Authorization", "Bearer sk-openai"}, 200, ""},
		{"azure bearer is not api-key", azure, chatBody, []string{"Authorization", "Bearer az-key"}, 401, "invalid_api_key"},
		{"azure wrong", azure, chatBody, []string{"Api-Key", "sk-openai"}, 401, "invalid_api_key"},
		{"azure ok", azure, chatBody, []string{"Api-Key", "az-key"}, 200, ""},
		{"anthropic no key", "/v1/messages", anth, []string{"Anthropic-Version", "2023-06-01"}, 401, "authentication_error"},
		{"anthropic bearer", "/v1/messages", anth, []string{"Authorization", "Bearer sk-ant", "Anthropic-Version", "2023-06-01"}, 401, "authentication_error"},
		{"anthropic no version", "/v1/messages", anth, []string{"X-Api-Key", "sk-ant"}, 400, "invalid_request_error"},
		{"anthropic ok", "/v1/messages", anth, []string{"X-Api-Key", "sk-ant", "Anthropic-Version", "2023-06-01"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, c, base+tc.path, withStream(tc.body, ""), tc.headers...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.errType == "" {
				return
			}
			m := obj(t, r.body)
			got := dig(m, "error", "code")
			if strings.HasPrefix(tc.path, "/v1/messages") {
				got = dig(m, "error", "type")
			}
			if got != tc.errType {
				t.Errorf("error %v, want %s: %s", got, tc.errType, r.body)
			}
			for _, key := range []string{"sk-openai", "az-key", "sk-ant", "sk-other", "sk-open"} {
				if strings.Contains(string(r.body), key) {
					t.Errorf("error body echoes a key: %s", r.body)
				}
			}
		})
	}
	if got := s.Requests(); got != 14 {
		t.Errorf("Requests() = %d, want 14", got)
	}
	if got := s.Rejected(); got != 10 {
		t.Errorf("Rejected() = %d, want 10", got)
	}
	rec := s.Received()
	if len(rec) != 14 {
		t.Fatalf("Received() has %d requests", len(rec))
	}
	if got := rec[5].Header.Get("Authorization"); rec[5].Path != "/v1/chat/completions" || got != "Bearer sk-openai" {
		t.Errorf("rec[5]: %s %q", rec[5].Path, got)
	}
	if rec[9].Path != "/openai/deployments/dep/chat/completions" || rec[9].RawQuery != "api-version=2024-10-21" || rec[9].Header.Get("Api-Key") != "az-key" {
		t.Errorf("rec[9]: %+v", rec[9])
	}
	if rec[13].Method != "POST" || string(rec[13].Body) != anth || rec[13].Header.Get("X-Api-Key") != "sk-ant" {
		t.Errorf("rec[13]: %s %s %q", rec[13].Method, rec[13].Body, rec[13].Header.Get("X-Api-Key"))
	}

	s.Reset()
	if s.Requests() != 0 || s.Rejected() != 0 || len(s.Received()) != 0 {
		t.Errorf("after Reset: %d %d %d", s.Requests(), s.Rejected(), len(s.Received()))
	}
	post(t, c, base+"/v1/chat/completions", streamChat, "Authorization", "Bearer sk-openai")
	if rec := s.Received(); s.Requests() != 1 || len(rec) != 1 || string(rec[0].Body) != streamChat {
		t.Errorf("after Reset and one request: %d, %v", s.Requests(), rec)
	}
}

func TestNoCredentialsConfigured(t *testing.T) {
	s, base := start(t, Options{})
	c := client(t, false)
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		body := withStream(chatBody, "")
		if path == "/v1/messages" {
			body = withStream(messagesBody, "")
		}
		if r := post(t, c, base+path, body); r.status != 200 {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
	if s.Rejected() != 0 || s.Requests() != 2 {
		t.Errorf("rejected %d, requests %d", s.Rejected(), s.Requests())
	}
}

func TestRecordLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, send, want int
	}{{3, 10, 3}, {3, 2, 2}, {-1, 5, 0}} {
		t.Run(fmt.Sprint(tc.limit, tc.send), func(t *testing.T) {
			s, base := start(t, Options{RecordLimit: tc.limit})
			c := client(t, false)
			for i := range tc.send {
				post(t, c, base+"/v1/completions", fmt.Sprintf(`{"model":"m%d","prompt":"x"}`, i))
			}
			rec := s.Received()
			if len(rec) != tc.want || s.Requests() != int64(tc.send) {
				t.Fatalf("%d recorded, %d counted", len(rec), s.Requests())
			}
			for i, r := range rec { // the most recent, oldest first
				if want := fmt.Sprintf(`"m%d"`, tc.send-tc.want+i); !strings.Contains(string(r.Body), want) {
					t.Errorf("rec[%d] = %s, want model %s", i, r.Body, want)
				}
			}
		})
	}
}

func TestOptionsValidateAndLogValue(t *testing.T) {
	err := Options{Words: -1, Interval: -1, Dimensions: maxDimensions + 1, Cassettes: []*Cassette{nil}}.Validate()
	for _, want := range []string{"words: must not be negative", "interval: must not be negative", "dimensions: at most", "cassettes[0]: nil"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("opts", "opts", Options{APIKey: "sk-secret-1", AnthropicAPIKey: "sk-secret-2", AzureAPIKey: "sk-secret-3"})
	if strings.Contains(b.String(), "sk-secret") || !strings.Contains(b.String(), "api_key_set=true") {
		t.Errorf("log line: %s", b.String())
	}
}
