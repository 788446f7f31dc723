package payload

import (
	"testing"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// refCases are request bodies with and without input by reference, on
// the endpoint they are sent to, with the kinds Parse must find (also
// fuzz seeds: refSeeds).
var refCases = []struct {
	name string
	ep   llmapi.Endpoint
	body string
	want Refs
}{
	{"responses input_file file_id", llmapi.Responses,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-abc"},{"type":"input_text","text":"sum it up"}]}]}`, RefFileID},
	{"responses input_file file_url", llmapi.Responses,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_url":"https://example.com/a.pdf"}]}]}`, RefFileURL},
	{"responses input_image file_id", llmapi.Responses,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-img"}]}]}`, RefFileID},
	{"responses input_image image_url is an image", llmapi.Responses,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`, 0},
	{"responses previous_response_id", llmapi.Responses,
		`{"model":"m","previous_response_id":"resp_123","input":"and then?"}`, RefPreviousResponseID},
	{"responses previous_response_id null", llmapi.Responses,
		`{"model":"m","previous_response_id":null,"input":"hi"}`, 0},
	{"responses conversation string", llmapi.Responses,
		`{"model":"m","conversation":"conv_123","input":"hi"}`, RefConversation},
	{"responses conversation object", llmapi.Responses,
		`{"model":"m","conversation":{"id":"conv_123"},"input":"hi"}`, RefConversation},
	{"responses stored prompt", llmapi.Responses,
		`{"model":"m","prompt":{"id":"pmpt_123","version":"2","variables":{"city":"Paris"}}}`, RefStoredPrompt},
	{"responses item_reference", llmapi.Responses,
		`{"model":"m","input":[{"type":"item_reference","id":"msg_123"},{"role":"user","content":"go on"}]}`, RefItemReference},
	{"responses escaped type", llmapi.Responses,
		`{"model":"m","input":[{"type":"item_\u0072eference","id":"msg_123"}]}`, RefItemReference},
	{"chat file part by id", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, RefFileID},
	{"chat file part inline", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,AAAA"}}]}]}`, 0},
	{"chat image_url by URL is an image", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}}]}]}`, 0},
	{"chat image_url by file_id", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"file_id":"file-img"}}]}]}`, RefFileID},
	{"chat assistant audio by id", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"assistant","audio":{"id":"audio_123"}},{"role":"user","content":"and?"}]}`, RefAudioID},
	{"chat citation url is not a source", llmapi.ChatCompletions,
		`{"model":"m","messages":[{"role":"assistant","content":"x","annotations":[{"type":"url_citation","url_citation":{"url":"https://example.com"}}]}]}`, 0},
	{"anthropic document by file", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_011"}}]}]}`, RefFileID},
	{"anthropic document by url", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}`, RefURL},
	{"anthropic image by url, url first", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"url":"https://example.com/a.png","type":"url"}}]}]}`, RefURL},
	{"anthropic image by file", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_011"}}]}]}`, RefFileID},
	{"anthropic container_upload", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_011"}]}]}`, RefFileID},
	{"anthropic base64 document", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0x"}}]}]}`, 0},
	{"anthropic web search result url is inline", llmapi.Messages,
		`{"model":"m","max_tokens":9,"messages":[{"role":"assistant","content":[{"type":"web_search_tool_result","tool_use_id":"t","content":[{"type":"web_search_result","url":"https://example.com","title":"x","encrypted_content":"abc"}]}]}]}`, 0},
	{"anthropic system by file", llmapi.Messages,
		`{"model":"m","max_tokens":9,"system":[{"type":"document","source":{"type":"file","file_id":"file_011"}}],"messages":[]}`, RefFileID},
	{"several kinds", llmapi.Responses,
		`{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"},{"type":"input_file","file_url":"https://x/y"}]}]}`,
		RefFileID | RefFileURL | RefPreviousResponseID},
	{"file_id outside the prompt does not count", llmapi.ChatCompletions,
		`{"model":"m","metadata":{"file_id":"f"},"messages":[{"role":"user","content":"hi"}]}`, 0},
	{"plain chat", llmapi.ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 0},
}

func TestParseFindsInputByReference(t *testing.T) {
	for _, tc := range refCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got.ByReference != tc.want {
				t.Errorf("ByReference = %q, want %q", got.ByReference, tc.want)
			}
			// The oracle agrees (FuzzParse checks the same on any body).
			ref, err := referenceRefs(tc.ep, []byte(tc.body))
			if err != nil || ref != tc.want {
				t.Errorf("referenceRefs = %q, %v; want %q", ref, err, tc.want)
			}
		})
	}
}

func TestParseBackground(t *testing.T) {
	for _, tc := range []struct {
		ep   llmapi.Endpoint
		body string
		want bool
		code string
	}{
		{llmapi.Responses, `{"model":"m","background":true,"input":"hi"}`, true, ""},
		{llmapi.Responses, `{"model":"m","background":false,"input":"hi"}`, false, ""},
		{llmapi.Responses, `{"model":"m","background":null,"input":"hi"}`, false, ""},
		{llmapi.Responses, `{"model":"m","background":"true","input":"hi"}`, false, "invalid_type"},
		{llmapi.Responses, `{"model":"m","background":false,"background":true}`, false, "duplicate_field"},
		{llmapi.Responses, `{"model":"m","Background":true}`, false, "invalid_field"},
		{llmapi.ChatCompletions, `{"model":"m","background":true,"messages":[]}`, false, ""}, // not a chat field
	} {
		got, err := Parse(tc.ep, []byte(tc.body))
		if tc.code != "" {
			if e, ok := apierr.As(err); !ok || e.Code != tc.code {
				t.Errorf("Parse(%v, %s) = %v, want %s", tc.ep, tc.body, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%v, %s): %v", tc.ep, tc.body, err)
		} else if got.Background != tc.want {
			t.Errorf("Parse(%v, %s).Background = %v, want %v", tc.ep, tc.body, got.Background, tc.want)
		}
	}
}

func TestRefsNames(t *testing.T) {
	r := RefFileID | RefStoredPrompt
	if got := r.String(); got != "file_id,prompt" {
		t.Errorf("String = %q", got)
	}
	if got := r.First(); got != "file_id" {
		t.Errorf("First = %q", got)
	}
	if Refs(0).Any() || Refs(0).First() != "" || !r.Any() {
		t.Error("Any/First of the empty set")
	}
	if len(refNames) != 8 || RefStoredPrompt != 1<<7 {
		t.Error("refNames does not match the constants")
	}
}
