package chain

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	celv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/filters/cel/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// TestLocalReply: every Envoy reply kind has an Anthropic mapper, then an
// OpenAI one (the first match wins), each a fixed JSON body in the
// dialect's error shape, with content-type application/json, matching
// on details Sluice's own replies never carry.
func TestLocalReply(t *testing.T) {
	for _, limit := range []int64{1, 4 << 20, 1 << 62} {
		cfg := LocalReply(limit)
		if err := cfg.ValidateAll(); err != nil {
			t.Fatalf("ValidateAll: %v", err)
		}
		kinds := envoyReplies(limit)
		if len(cfg.GetMappers()) != 2*len(kinds) {
			t.Fatalf("%d mappers for %d kinds", len(cfg.GetMappers()), len(kinds))
		}
		for i, k := range kinds {
			if strings.HasPrefix(k.details, "sluice_") || k.details == "ext_authz_denied" {
				t.Errorf("%s: Sluice's own replies carry such details", k.details)
			}
			anth, oai := cfg.GetMappers()[2*i], cfg.GetMappers()[2*i+1]
			and := anth.GetFilter().GetAndFilter().GetFilters()
			if len(and) != 2 || and[1].GetHeaderFilter().GetHeader().GetStringMatch().GetSafeRegex().GetRegex() != AnthropicPathRegex {
				t.Fatalf("%s: Anthropic mapper filter %v", k.details, anth.GetFilter())
			}
			for _, f := range []*celv3.ExpressionFilter{celOf(t, and[0].GetExtensionFilter().GetTypedConfig()), celOf(t, oai.GetFilter().GetExtensionFilter().GetTypedConfig())} {
				if f.GetExpression() != k.expression() {
					t.Errorf("%s: expression %q", k.details, f.GetExpression())
				}
			}
			e := &apierr.Error{Status: k.status, Code: k.code, Message: k.message, AnthropicMessage: k.anthropic}
			for _, c := range []struct {
				d    llmapi.Dialect
				body string
				ct   string
			}{
				{llmapi.Anthropic, anth.GetBodyFormatOverride().GetTextFormat(), anth.GetBodyFormatOverride().GetContentType()},
				{llmapi.OpenAI, oai.GetBodyFormatOverride().GetTextFormat(), oai.GetBodyFormatOverride().GetContentType()},
			} {
				if c.body != string(apierr.Body(c.d, e)) || c.ct != "application/json" || !json.Valid([]byte(c.body)) {
					t.Errorf("%s %v: body %s, type %q", k.details, c.d, c.body, c.ct)
				}
				// A '%' would be a command operator of the text_format.
				if strings.Contains(c.body, "%") {
					t.Errorf("%s %v: body holds a %%: %s", k.details, c.d, c.body)
				}
			}
		}
	}
	if !strings.Contains(LocalReply(4 << 20).GetMappers()[1].GetBodyFormatOverride().GetTextFormat(), `larger than 4194304 bytes`) {
		t.Error("the 413 does not state the limit")
	}
	// Anthropic's 413 opens with Anthropic's words for it.
	if got := LocalReply(4 << 20).GetMappers()[0].GetBodyFormatOverride().GetTextFormat(); !strings.HasPrefix(got, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size (`) {
		t.Errorf("Anthropic's 413: %s", got)
	}
}

func celOf(t *testing.T, a *anypb.Any) *celv3.ExpressionFilter {
	t.Helper()
	f := &celv3.ExpressionFilter{}
	if err := a.UnmarshalTo(f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAnthropicPathRegex: the mappers' path filter, matched as Envoy
// matches a safe_regex (the whole value), agrees with llmapi.DialectFor.
func TestAnthropicPathRegex(t *testing.T) {
	re := regexp.MustCompile(`^(?:` + AnthropicPathRegex + `)$`)
	for _, p := range []string{
		"/v1/messages", "/v1/messages?beta=true", "/v1/messages/", "/v1/messages/batches", "/v1/messages/count_tokens?x=1",
		"/v1/messages/?x", "/v1/complete", "/v1/complete?x", "/v1/messagesX", "/v1/messages2/x", "/v1/completeX",
		"/v1/chat/completions", "/v1/completions", "/", "", "/v1/messages#f", "/V1/messages", "/x/v1/messages",
	} {
		if got, want := re.MatchString(p), llmapi.DialectFor(p) == llmapi.Anthropic; got != want {
			t.Errorf("%q: regex %v, DialectFor Anthropic %v", p, got, want)
		}
	}
}

// TestLocalReplyFirstMatch: the mappers are tried in order and the first
// match applies, so no kind may shadow a later one. For each kind's own
// details (a longer one for a prefix) and status, the first kind that
// matches is that kind; and a kind matched by status has a mapper for
// every status Envoy sends with its details.
func TestLocalReplyFirstMatch(t *testing.T) {
	kinds := envoyReplies(1 << 20)
	matches := func(k envoyReply, details string, status int) bool {
		if k.byStatus && k.status != status {
			return false
		}
		if k.prefix {
			return strings.HasPrefix(details, k.details)
		}
		return details == k.details
	}
	for i, k := range kinds {
		d := k.details
		if k.prefix {
			d += "x"
		}
		for j, o := range kinds {
			if matches(o, d, k.status) {
				if j != i {
					t.Errorf("%s %d: answered by kind %d (%s %d), not its own", k.details, k.status, j, o.details, o.status)
				}
				break
			}
		}
	}
	// Envoy's timeouts answer 408 before the request is complete and 504
	// after (Utility::maybeRequestTimeoutCode); both have their mapper.
	for _, d := range []string{"stream_idle_timeout", "request_overall_timeout"} {
		for _, st := range []int{408, 504} {
			var found bool
			for _, k := range kinds {
				found = found || (k.details == d && k.status == st && k.byStatus)
			}
			if !found {
				t.Errorf("%s: no mapper for status %d", d, st)
			}
		}
	}
}

// TestDetailsExpression: the CEL the mappers carry.
func TestDetailsExpression(t *testing.T) {
	for _, c := range []struct {
		d      string
		prefix bool
		status int
		want   string
	}{
		{"overload", false, 0, "response.code_details == 'overload'"},
		{"http1.", true, 0, "response.code_details.startsWith('http1.')"},
		{"stream_idle_timeout", false, 408, "response.code_details == 'stream_idle_timeout' && response.code == 408"},
		{"http1.", true, 400, "response.code_details.startsWith('http1.') && response.code == 400"},
	} {
		if got := DetailsExpression(c.d, c.prefix, c.status); got != c.want {
			t.Errorf("%q %v %d: %q, want %q", c.d, c.prefix, c.status, got, c.want)
		}
	}
}
