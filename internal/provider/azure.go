package provider

import (
	"fmt"
	"net/url"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
)

// AzureOpenAI is Azure OpenAI (kind "azure-openai"): the OpenAI API but
// the Responses API, the credential in api-key, the deployment (the
// model's upstream name) and api-version in the path, api_key and
// api_version required.
type AzureOpenAI struct{}

var _ Provider = AzureOpenAI{}

// Unsupported refuses the Anthropic Messages API and the Responses API.
func (AzureOpenAI) Unsupported(ep llmapi.Endpoint, name string) string {
	if msg := openAIFamily(ep, name); msg != "" {
		return msg
	}
	if ep == llmapi.Responses {
		return fmt.Sprintf("the Responses API is not routed to Azure OpenAI provider %q", name)
	}
	return ""
}

// azureOperation is the operation in a deployment's path, per endpoint.
var azureOperation = map[llmapi.Endpoint]string{
	llmapi.ChatCompletions: "chat/completions",
	llmapi.Completions:     "completions",
	llmapi.Embeddings:      "embeddings",
}

// Rewrite sets api-key (removing the client's account headers unless
// forwarded) and the path
// <prefix>/openai/deployments/<upstream>/<operation>?api-version=<v>, and
// drops the model from the body: Azure takes the deployment from the path.
func (AzureOpenAI) Rewrite(t Target, r Request) Rewrite {
	var rw Rewrite
	rw.credential(providerkind.AzureOpenAI, t, "api-key", t.APIKey)
	rw.set(":path", t.PathPrefix+"/openai/deployments/"+url.PathEscape(t.Upstream)+"/"+azureOperation[r.Endpoint]+"?api-version="+url.QueryEscape(t.APIVersion))
	rw.Body.DropModel = true
	return rw.done()
}
