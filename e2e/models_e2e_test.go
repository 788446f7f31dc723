package e2e

import (
	"errors"
	"slices"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/sluicegw/sluice/bench/mockllm"
	"github.com/sluicegw/sluice/internal/testctx"
)

// TestSDKModels: each official Go SDK's models.list() returns exactly the
// models the key may use that its own API can call — OpenAI's SDK the
// OpenAI-family models (OpenAI, Azure OpenAI, OpenAI-compatible),
// Anthropic's the Anthropic ones — each once under its canonical name,
// aliases not listed, decoded by the SDK from its API's own list shape;
// models.get() by an alias answers with the model it names; a model the
// key may not use, or that the SDK's API cannot call, is the SDK's typed
// 404. Sluice answers all of it: nothing reaches the provider.
func TestSDKModels(t *testing.T) {
	mock, mockAddr := mockProvider(t, mockllm.Options{APIKey: openaiKey, AnthropicAPIKey: anthropicKey, AzureAPIKey: azureKey})
	s := startSluice(t, gatewayConfig)
	_, all := s.createKey(t, "apps")
	_, narrow := s.createKey(t, "apps", "--models", "mini,claude-*")
	b := gatewayBootstrap(t, s.grpcAddr, mockAddr)
	eachProxy(t, b, func(t *testing.T, p proxy) {
		ctx := testctx.Deadline(t)
		mock.Reset()
		for _, tt := range []struct {
			name                 string
			key                  string
			openAI, anthropicIDs []string
		}{
			{"the team's allow-list", all, []string{"gpt-4o-mini", "gpt-5-nano", "text-embedding-3-small", "azure-4o", "llama-3.1-8b"}, []string{"claude-sonnet-4"}},
			{"a key allowed an alias", narrow, []string{"gpt-4o-mini"}, []string{"claude-sonnet-4"}},
		} {
			oc, ac := sdkClients(p.url, tt.key)
			page, err := oc.Models.List(ctx)
			if err != nil {
				t.Fatalf("%s: openai models.list: %v", tt.name, err)
			}
			var got []string
			for _, m := range page.Data {
				got = append(got, m.ID)
				if m.Object != "model" || m.OwnedBy != "sluice" {
					t.Errorf("%s: openai model %+v, want object model, owned_by sluice", tt.name, m)
				}
			}
			if !slices.Equal(got, tt.openAI) || page.Object != "list" {
				t.Errorf("%s: openai models.list = %v (object %q), want %v", tt.name, got, page.Object, tt.openAI)
			}

			apage, err := ac.Models.List(ctx, anthropic.ModelListParams{})
			if err != nil {
				t.Fatalf("%s: anthropic models.list: %v", tt.name, err)
			}
			got = nil
			for _, m := range apage.Data {
				got = append(got, m.ID)
				if m.Type != "model" || m.DisplayName != m.ID || m.CreatedAt.Unix() != 0 {
					t.Errorf("%s: anthropic model %+v", tt.name, m)
				}
			}
			want := tt.anthropicIDs
			if !slices.Equal(got, want) || apage.HasMore || apage.FirstID != want[0] || apage.LastID != want[len(want)-1] {
				t.Errorf("%s: anthropic models.list = %v (%+v), want %v", tt.name, got, apage, want)
			}
		}

		oc, ac := sdkClients(p.url, narrow)
		if m, err := oc.Models.Get(ctx, "mini"); err != nil || m.ID != "gpt-4o-mini" {
			t.Errorf("openai models.get(mini) = %+v, %v; want the model the alias names", m, err)
		}
		if m, err := ac.Models.Get(ctx, "claude-sonnet-4", anthropic.ModelGetParams{}); err != nil || m.ID != "claude-sonnet-4" || m.DisplayName != "claude-sonnet-4" {
			t.Errorf("anthropic models.get(claude-sonnet-4) = %+v, %v", m, err)
		}
		for _, id := range []string{"gpt-4o", "claude-sonnet-4"} { // not the key's; not OpenAI's API
			_, err := oc.Models.Get(ctx, id)
			var oerr *openai.Error
			if !errors.As(err, &oerr) || oerr.StatusCode != 404 || oerr.Code != "model_not_found" {
				t.Errorf("openai models.get(%s): %v, want the SDK's 404", id, err)
			}
		}
		for _, id := range []string{"gpt-4o", "mini"} { // not the key's; not Anthropic's API
			_, err := ac.Models.Get(ctx, id, anthropic.ModelGetParams{})
			var aerr *anthropic.Error
			if !errors.As(err, &aerr) || aerr.StatusCode != 404 {
				t.Errorf("anthropic models.get(%s): %v, want the SDK's 404", id, err)
			}
		}
		if n := mock.Requests(); n != 0 {
			t.Errorf("the provider received %d requests for the model endpoints, want 0", n)
		}
	})
}
