package mockllm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// apiRequest is the union of the request fields the mock reads from every
// dialect. Prompt-shaped fields stay raw: they are only counted.
type apiRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        json.RawMessage `json:"instructions"`
	System              json.RawMessage `json:"system"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	Dimensions          int             `json:"dimensions"`
	EncodingFormat      string          `json:"encoding_format"`
}

// call is one synthesised reply in the making.
type call struct {
	c       *controls
	model   string
	id      string // numeric suffix shared by every id in the reply
	created int64
	use     usage
	words   int // after the max-token cap
	chunks  int // ≤ words
	capped  bool
	stream  bool
	// includeUsage: the OpenAI stream ends with a usage chunk (the
	// request asked for it and usage is not omitted).
	includeUsage bool
}

// badRequest is a request the real provider would refuse with 400.
type badRequest struct{ param, msg string }

func (e *badRequest) Error() string { return e.msg }

// synthesize answers a valid request with a made-up reply whose usage
// follows the documented token rules.
func (s *Server) synthesize(w http.ResponseWriter, r *http.Request, c *controls, rt route, body []byte) {
	d := rt.dialect()
	if rt.azure() && r.URL.Query().Get("api-version") == "" {
		s.failParam(w, r, c, d, http.StatusBadRequest, "", "api-version", "mock: the api-version query parameter is required on Azure OpenAI paths")
		return
	}
	var req apiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.failParam(w, r, c, d, http.StatusBadRequest, "", "", "mock: the request body is not a valid JSON request: "+err.Error())
		return
	}
	if rt.ep == epCountTokens {
		s.countTokens(w, r, c, &req)
		return
	}
	p, err := s.newCall(c, rt, &req)
	if err != nil {
		s.failParam(w, r, c, d, http.StatusBadRequest, "", err.param, err.msg)
		return
	}
	var rep reply
	switch rt.ep {
	case epChat:
		rep = chatReply(p)
	case epCompletions:
		rep = completionReply(p)
	case epEmbeddings:
		rep, err = s.embeddingReply(p, &req)
		if err != nil {
			s.failParam(w, r, c, d, http.StatusBadRequest, "", err.param, err.msg)
			return
		}
	case epResponses:
		rep = responsesReply(p)
	case epMessages:
		rep = messagesReply(p)
	}
	h := w.Header()
	if d == anthropic {
		h.Set("Request-Id", "req_mock"+p.id)
	} else {
		h.Set("X-Request-Id", "req_mock"+p.id)
	}
	if rep.events != nil {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Content-Type", "application/json")
	}
	s.send(w, r, c, rep)
}

// newCall validates the fields every endpoint shares and sizes the reply.
func (s *Server) newCall(c *controls, rt route, req *apiRequest) (*call, *badRequest) {
	model := req.Model
	if rt.azure() {
		model = rt.deployment
	}
	if model == "" {
		return nil, &badRequest{"model", "you must provide a model parameter"}
	}
	var prompt int64
	var limit *int64
	limitName := "max_tokens"
	switch rt.ep {
	case epChat, epMessages:
		var msgs []json.RawMessage
		if json.Unmarshal(req.Messages, &msgs) != nil || len(msgs) == 0 {
			return nil, &badRequest{"messages", "messages: a non-empty array of messages is required"}
		}
		prompt = promptTokens(req.Messages)
		if rt.ep == epMessages {
			prompt += promptTokens(req.System)
		}
		limit = req.MaxTokens
		if rt.ep == epChat && req.MaxCompletionTokens != nil {
			limit, limitName = req.MaxCompletionTokens, "max_completion_tokens"
		}
		if rt.ep == epMessages && limit == nil {
			return nil, &badRequest{"max_tokens", "max_tokens: Field required"}
		}
	case epCompletions:
		prompt, limit = promptTokens(req.Prompt), req.MaxTokens
	case epResponses:
		prompt = promptTokens(req.Instructions) + promptTokens(req.Input)
		limit, limitName = req.MaxOutputTokens, "max_output_tokens"
	}
	if c.inputTokens > 0 {
		prompt = c.inputTokens
	}
	if limit != nil && *limit < 1 {
		return nil, &badRequest{limitName, limitName + ": must be at least 1"}
	}
	stream := req.Stream && rt.ep != epEmbeddings
	if req.StreamOptions != nil && !stream && (rt.ep == epChat || rt.ep == epCompletions) {
		return nil, &badRequest{"stream_options", "stream_options: only allowed when stream is true"}
	}
	words := c.words
	capped := limit != nil && *limit < int64(words)
	if capped {
		words = int(*limit)
	}
	return &call{
		c:            c,
		model:        model,
		id:           fmt.Sprintf("%06d", s.ids.Add(1)),
		created:      time.Now().Unix(),
		use:          newUsage(prompt, int64(words), c),
		words:        words,
		chunks:       min(c.chunks, words),
		capped:       capped,
		stream:       stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage && !c.omitUsage,
	}, nil
}

// ---- OpenAI chat completions and completions ----

type openAIUsage struct {
	PromptTokens            int64             `json:"prompt_tokens"`
	CompletionTokens        int64             `json:"completion_tokens"`
	TotalTokens             int64             `json:"total_tokens"`
	PromptTokensDetails     promptDetails     `json:"prompt_tokens_details"`
	CompletionTokensDetails completionDetails `json:"completion_tokens_details"`
}

type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
	AudioTokens  int64 `json:"audio_tokens,omitempty"`
}

type completionDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
	AudioTokens     int64 `json:"audio_tokens,omitempty"`
}

func (p *call) openAIUsage() *openAIUsage {
	if p.c.omitUsage {
		return nil
	}
	u := p.use
	return &openAIUsage{
		PromptTokens:            u.prompt,
		CompletionTokens:        u.output(),
		TotalTokens:             u.total(),
		PromptTokensDetails:     promptDetails{CachedTokens: u.cached, AudioTokens: u.audioIn},
		CompletionTokensDetails: completionDetails{ReasoningTokens: u.reasoning, AudioTokens: u.audioOut},
	}
}

func (p *call) finishReason() string {
	if p.capped {
		return "length"
	}
	return "stop"
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *openAIUsage `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	// Usage is absent unless the request asked for usage; then it is
	// null on every chunk but the usage chunk.
	Usage json.RawMessage `json:"usage,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

var jsonNull = json.RawMessage("null")

// openAIStreamError is the in-stream error event x-mock-error-after sends
// on OpenAI streams.
func openAIStreamError(crlf bool) []byte {
	return sseData(crlf, errorBody(openAI, http.StatusInternalServerError, "", "",
		"mock: injected mid-stream error (x-mock-error-after)"))
}

func chatReply(p *call) reply {
	id := "chatcmpl-mock" + p.id
	if !p.stream {
		return reply{status: http.StatusOK, body: mustJSON(chatCompletion{
			ID: id, Object: "chat.completion", Created: p.created, Model: p.model,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: Text(p.words)}, FinishReason: p.finishReason()}},
			Usage:   p.openAIUsage(),
		})}
	}
	crlf := p.c.crlf
	var perChunk json.RawMessage
	if p.includeUsage {
		perChunk = jsonNull
	}
	chunk := func(ph phase, choices []chatChunkChoice, u json.RawMessage) event {
		return event{phase: ph, data: sseData(crlf, mustJSON(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: p.created, Model: p.model, Choices: choices, Usage: u,
		}))}
	}
	empty := ""
	events := make([]event, 0, p.chunks+4)
	events = append(events, chunk(phasePre, []chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}}, perChunk))
	for _, t := range ChunkTexts(p.words, p.chunks) {
		events = append(events, chunk(phaseContent, []chatChunkChoice{{Delta: chatDelta{Content: &t}}}, perChunk))
	}
	finish := p.finishReason()
	events = append(events, chunk(phasePost, []chatChunkChoice{{FinishReason: &finish}}, perChunk))
	if p.includeUsage {
		events = append(events, chunk(phasePost, []chatChunkChoice{}, mustJSON(p.openAIUsage())))
	}
	events = append(events, event{phase: phasePost, data: sseData(crlf, []byte("[DONE]"))})
	return reply{status: http.StatusOK, events: events, errEvent: openAIStreamError(crlf)}
}

type textCompletion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   json.RawMessage    `json:"usage,omitempty"`
}

type completionChoice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

func completionReply(p *call) reply {
	id := "cmpl-mock" + p.id
	finish := p.finishReason()
	if !p.stream {
		var u json.RawMessage
		if ou := p.openAIUsage(); ou != nil {
			u = mustJSON(ou)
		}
		return reply{status: http.StatusOK, body: mustJSON(textCompletion{
			ID: id, Object: "text_completion", Created: p.created, Model: p.model,
			Choices: []completionChoice{{Text: Text(p.words), FinishReason: &finish}},
			Usage:   u,
		})}
	}
	crlf := p.c.crlf
	var perChunk json.RawMessage
	if p.includeUsage {
		perChunk = jsonNull
	}
	chunk := func(ph phase, choices []completionChoice, u json.RawMessage) event {
		return event{phase: ph, data: sseData(crlf, mustJSON(textCompletion{
			ID: id, Object: "text_completion", Created: p.created, Model: p.model, Choices: choices, Usage: u,
		}))}
	}
	events := make([]event, 0, p.chunks+3)
	for _, t := range ChunkTexts(p.words, p.chunks) {
		events = append(events, chunk(phaseContent, []completionChoice{{Text: t}}, perChunk))
	}
	events = append(events, chunk(phasePost, []completionChoice{{FinishReason: &finish}}, perChunk))
	if p.includeUsage {
		events = append(events, chunk(phasePost, []completionChoice{}, mustJSON(p.openAIUsage())))
	}
	events = append(events, event{phase: phasePost, data: sseData(crlf, []byte("[DONE]"))})
	return reply{status: http.StatusOK, events: events, errEvent: openAIStreamError(crlf)}
}

// ---- OpenAI embeddings ----

type embeddingList struct {
	Object string          `json:"object"`
	Data   []embedding     `json:"data"`
	Model  string          `json:"model"`
	Usage  *embeddingUsage `json:"usage,omitempty"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

func (s *Server) embeddingReply(p *call, req *apiRequest) (reply, *badRequest) {
	items, ok := embedInputs(req.Input)
	if !ok {
		return reply{}, &badRequest{"input", "input: a string, an array of strings, or token arrays is required"}
	}
	b64 := false
	switch req.EncodingFormat {
	case "", "float":
	case "base64":
		b64 = true
	default:
		return reply{}, &badRequest{"encoding_format", "encoding_format: must be float or base64"}
	}
	dims := s.opts.Dimensions
	switch {
	case p.c.dimensions > 0:
		dims = p.c.dimensions
	case req.Dimensions > 0:
		dims = min(req.Dimensions, maxDimensions)
	case req.Dimensions < 0:
		return reply{}, &badRequest{"dimensions", "dimensions: must be at least 1"}
	}
	list := embeddingList{Object: "list", Model: p.model, Data: make([]embedding, len(items))}
	var tokens int64
	for i, it := range items {
		v := vector(it.seed, dims)
		var e any = v
		if b64 {
			e = base64.StdEncoding.EncodeToString(float32Bytes(v))
		}
		list.Data[i] = embedding{Object: "embedding", Index: i, Embedding: e}
		tokens += it.tokens
	}
	if !p.c.omitUsage {
		list.Usage = &embeddingUsage{PromptTokens: tokens, TotalTokens: tokens}
	}
	return reply{status: http.StatusOK, body: mustJSON(list)}, nil
}

// ---- OpenAI Responses API ----

type response struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	CreatedAt         int64              `json:"created_at"`
	Status            string             `json:"status"`
	IncompleteDetails *incompleteDetails `json:"incomplete_details"`
	Model             string             `json:"model"`
	Output            []responseItem     `json:"output"`
	Usage             *responseUsage     `json:"usage"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseItem struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []responsePart `json:"content"`
}

type responsePart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responseUsage struct {
	InputTokens         int64             `json:"input_tokens"`
	InputTokensDetails  promptDetails     `json:"input_tokens_details"`
	OutputTokens        int64             `json:"output_tokens"`
	OutputTokensDetails completionDetails `json:"output_tokens_details"`
	TotalTokens         int64             `json:"total_tokens"`
}

type responseEvent struct {
	Type           string        `json:"type"`
	SequenceNumber int           `json:"sequence_number"`
	Response       *response     `json:"response,omitempty"`
	OutputIndex    *int          `json:"output_index,omitempty"`
	ItemID         string        `json:"item_id,omitempty"`
	ContentIndex   *int          `json:"content_index,omitempty"`
	Item           *responseItem `json:"item,omitempty"`
	Part           *responsePart `json:"part,omitempty"`
	Delta          *string       `json:"delta,omitempty"`
	Text           *string       `json:"text,omitempty"`
	// error events
	Code    string  `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

func responsesReply(p *call) reply {
	id, msgID := "resp_mock"+p.id, "msg_mock"+p.id
	text := Text(p.words)
	status, final := "completed", "response.completed"
	var incomplete *incompleteDetails
	if p.capped {
		status, final = "incomplete", "response.incomplete"
		incomplete = &incompleteDetails{Reason: "max_output_tokens"}
	}
	var u *responseUsage
	if !p.c.omitUsage {
		u = &responseUsage{
			InputTokens:         p.use.prompt,
			InputTokensDetails:  promptDetails{CachedTokens: p.use.cached},
			OutputTokens:        p.use.output(),
			OutputTokensDetails: completionDetails{ReasoningTokens: p.use.reasoning},
			TotalTokens:         p.use.total(),
		}
	}
	donePart := responsePart{Type: "output_text", Text: text, Annotations: []any{}}
	doneItem := responseItem{ID: msgID, Type: "message", Status: "completed", Role: "assistant", Content: []responsePart{donePart}}
	done := response{
		ID: id, Object: "response", CreatedAt: p.created, Status: status, IncompleteDetails: incomplete,
		Model: p.model, Output: []responseItem{doneItem}, Usage: u,
	}
	if !p.stream {
		return reply{status: http.StatusOK, body: mustJSON(done)}
	}

	crlf := p.c.crlf
	seq := 0
	zero := 0
	var events []event
	add := func(ph phase, e responseEvent) {
		e.SequenceNumber = seq
		seq++
		events = append(events, event{phase: ph, data: sseNamed(crlf, e.Type, mustJSON(e))})
	}
	started := response{ID: id, Object: "response", CreatedAt: p.created, Status: "in_progress", Model: p.model, Output: []responseItem{}}
	add(phasePre, responseEvent{Type: "response.created", Response: &started})
	add(phasePre, responseEvent{Type: "response.in_progress", Response: &started})
	add(phasePre, responseEvent{Type: "response.output_item.added", OutputIndex: &zero,
		Item: &responseItem{ID: msgID, Type: "message", Status: "in_progress", Role: "assistant", Content: []responsePart{}}})
	add(phasePre, responseEvent{Type: "response.content_part.added", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero,
		Part: &responsePart{Type: "output_text", Text: "", Annotations: []any{}}})
	for _, t := range ChunkTexts(p.words, p.chunks) {
		add(phaseContent, responseEvent{Type: "response.output_text.delta", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Delta: &t})
	}
	add(phasePost, responseEvent{Type: "response.output_text.done", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Text: &text})
	add(phasePost, responseEvent{Type: "response.content_part.done", ItemID: msgID, OutputIndex: &zero, ContentIndex: &zero, Part: &donePart})
	add(phasePost, responseEvent{Type: "response.output_item.done", OutputIndex: &zero, Item: &doneItem})
	add(phasePost, responseEvent{Type: final, Response: &done})

	// The error event takes the sequence number of the event it replaces;
	// any value is valid for a stream that ends there.
	errEvent := sseNamed(crlf, "error", mustJSON(responseEvent{
		Type: "error", SequenceNumber: seq, Code: "server_error",
		Message: "mock: injected mid-stream error (x-mock-error-after)",
	}))
	return reply{status: http.StatusOK, events: events, errEvent: errEvent}
}

// ---- Anthropic Messages ----

type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        *anthropicUsage  `json:"usage,omitempty"`
}

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicUsage struct {
	InputTokens              int64          `json:"input_tokens"`
	CacheCreationInputTokens int64          `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64          `json:"cache_read_input_tokens"`
	CacheCreation            *cacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int64          `json:"output_tokens"`
}

// cacheCreation is the cache writes by TTL, as Anthropic reports them
// beside cache_creation_input_tokens.
type cacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

type anthropicEvent struct {
	Type         string            `json:"type"`
	Message      *anthropicMessage `json:"message,omitempty"`
	Index        *int              `json:"index,omitempty"`
	ContentBlock *anthropicBlock   `json:"content_block,omitempty"`
	Delta        any               `json:"delta,omitempty"`
	Usage        *outputUsage      `json:"usage,omitempty"`
}

type textDelta struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type messageDelta struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

type outputUsage struct {
	OutputTokens int64 `json:"output_tokens"`
}

// anthropicUsage splits the prompt the Anthropic way: input_tokens is
// what was neither read from nor written to the cache.
func (p *call) anthropicUsage(output int64) *anthropicUsage {
	if p.c.omitUsage {
		return nil
	}
	u := p.use
	a := &anthropicUsage{
		InputTokens:              u.prompt - u.cached - u.cacheWrite,
		CacheCreationInputTokens: u.cacheWrite,
		CacheReadInputTokens:     u.cached,
		OutputTokens:             output,
	}
	if u.cacheWrite1h > 0 {
		a.CacheCreation = &cacheCreation{Ephemeral5m: u.cacheWrite - u.cacheWrite1h, Ephemeral1h: u.cacheWrite1h}
	}
	return a
}

func messagesReply(p *call) reply {
	id := "msg_mock" + p.id
	stop := "end_turn"
	if p.capped {
		stop = "max_tokens"
	}
	if !p.stream {
		return reply{status: http.StatusOK, body: mustJSON(anthropicMessage{
			ID: id, Type: "message", Role: "assistant", Model: p.model,
			Content:    []anthropicBlock{{Type: "text", Text: Text(p.words)}},
			StopReason: &stop, Usage: p.anthropicUsage(p.use.output()),
		})}
	}
	crlf := p.c.crlf
	zero := 0
	var events []event
	add := func(ph phase, e anthropicEvent) {
		events = append(events, event{phase: ph, data: sseNamed(crlf, e.Type, mustJSON(e))})
	}
	add(phasePre, anthropicEvent{Type: "message_start", Message: &anthropicMessage{
		ID: id, Type: "message", Role: "assistant", Model: p.model, Content: []anthropicBlock{},
		Usage: p.anthropicUsage(1),
	}})
	add(phasePre, anthropicEvent{Type: "content_block_start", Index: &zero, ContentBlock: &anthropicBlock{Type: "text"}})
	add(phasePre, anthropicEvent{Type: "ping"})
	for _, t := range ChunkTexts(p.words, p.chunks) {
		add(phaseContent, anthropicEvent{Type: "content_block_delta", Index: &zero, Delta: textDelta{Type: "text_delta", Text: t}})
	}
	add(phasePost, anthropicEvent{Type: "content_block_stop", Index: &zero})
	var final *outputUsage
	if !p.c.omitUsage {
		final = &outputUsage{OutputTokens: p.use.output()}
	}
	add(phasePost, anthropicEvent{Type: "message_delta", Delta: messageDelta{StopReason: stop}, Usage: final})
	add(phasePost, anthropicEvent{Type: "message_stop"})
	errEvent := sseNamed(crlf, "error", errorBody(anthropic, 529, "", "", "Overloaded (mock: injected mid-stream error, x-mock-error-after)"))
	return reply{status: http.StatusOK, events: events, errEvent: errEvent}
}

// countTokens answers Anthropic's count_tokens: {"input_tokens": N}, N the
// prompt tokens a /v1/messages request with the same messages and system
// is charged (without max_tokens, which count_tokens does not take).
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, c *controls, req *apiRequest) {
	var msgs []json.RawMessage
	switch {
	case req.Model == "":
		s.failParam(w, r, c, anthropic, http.StatusBadRequest, "", "model", "you must provide a model parameter")
		return
	case json.Unmarshal(req.Messages, &msgs) != nil || len(msgs) == 0:
		s.failParam(w, r, c, anthropic, http.StatusBadRequest, "", "messages", "messages: a non-empty array of messages is required")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_mock_count_tokens")
	_ = json.NewEncoder(w).Encode(map[string]int64{"input_tokens": promptTokens(req.Messages) + promptTokens(req.System)}) // a failed write means the client left
}
