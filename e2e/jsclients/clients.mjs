// The official OpenAI and Anthropic JavaScript SDKs and the Vercel AI SDK,
// called the way a user's code calls them, against a Sluice listener.
// TestJSClients (e2e/sdk_js_e2e_test.go) runs it with SLUICE_BASE (the
// listener's URL), SLUICE_KEY (a key of a team allowed every model named
// below) and SLUICE_DENIED_MODEL (a model that team may not use), and
// checks what it prints: one line per scenario, "sluice-result " and
// {"name", "ok", "detail"} as JSON. A scenario that throws is not ok; its detail is
// the error. Retries are off everywhere, so every call is one request.

import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { generateText, streamText, embed } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";

const base = process.env.SLUICE_BASE;
const key = process.env.SLUICE_KEY;
const denied = process.env.SLUICE_DENIED_MODEL;
const chatModel = "gpt-4o-mini";
const embeddingModel = "text-embedding-3-small";
const claude = "claude-sonnet-4";
const hello = [{ role: "user", content: "hello" }];

const openai = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const vercelOpenAI = createOpenAI({ baseURL: base + "/v1", apiKey: key });
const vercelAnthropic = createAnthropic({ baseURL: base + "/v1", apiKey: key });

// expectError runs fn and returns what the SDK's error says, or throws if
// the call succeeded or failed with something other than cls.
async function expectError(fn, cls) {
  try {
    await fn();
  } catch (e) {
    if (!(e instanceof cls)) {
      throw new Error(`got ${e?.constructor?.name}: ${e?.message}, want ${cls.name}`);
    }
    return { status: e.status, type: e.type ?? e.error?.error?.type ?? e.error?.type, code: e.code ?? null, param: e.param ?? null, retryAfter: e.headers?.get?.("retry-after") ?? null };
  }
  throw new Error(`the call succeeded, want ${cls.name}`);
}

const scenarios = {
  "openai chat": async () => {
    const r = await openai.chat.completions.create({ model: chatModel, messages: hello });
    return { content: r.choices[0].message.content, totalTokens: r.usage.total_tokens };
  },
  // The common client loop: chunk.choices[0] on every chunk. It throws on a
  // usage-only chunk the client did not ask for.
  "openai chat stream": async () => {
    const stream = await openai.chat.completions.create({ model: chatModel, messages: hello, stream: true });
    let text = "", chunks = 0, usage = null;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0].delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    return { text, chunks, usage };
  },
  "openai chat stream with include_usage": async () => {
    const stream = await openai.chat.completions.create({ model: chatModel, messages: hello, stream: true, stream_options: { include_usage: true } });
    let text = "", usage = null, usageChunkChoices = null;
    for await (const chunk of stream) {
      if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
      if (chunk.usage) { usage = chunk.usage; usageChunkChoices = chunk.choices.length; }
    }
    return { text, usage, usageChunkChoices };
  },
  "openai embeddings": async () => {
    const r = await openai.embeddings.create({ model: embeddingModel, input: "hello" });
    return { dims: r.data[0].embedding.length, promptTokens: r.usage.prompt_tokens };
  },
  "openai responses": async () => {
    const r = await openai.responses.create({ model: chatModel, input: "hello" });
    return { text: r.output_text, totalTokens: r.usage.total_tokens };
  },
  "openai responses stream": async () => {
    const stream = await openai.responses.create({ model: chatModel, input: "hello", stream: true });
    let text = "", completed = null;
    for await (const ev of stream) {
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.completed") completed = ev.response.usage;
    }
    return { text, usage: completed };
  },
  "openai models.list": async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    return { ids };
  },
  "openai unknown key": () => expectError(() => new OpenAI({ baseURL: base + "/v1", apiKey: "sk-unknown", maxRetries: 0 }).chat.completions.create({ model: chatModel, messages: hello }), OpenAI.AuthenticationError),
  "openai model not allowed": () => expectError(() => openai.chat.completions.create({ model: denied, messages: hello }), OpenAI.PermissionDeniedError),
  "openai unknown model": () => expectError(() => openai.chat.completions.create({ model: "no-such-model", messages: hello }), OpenAI.NotFoundError),
  "anthropic messages": async () => {
    const m = await anthropic.messages.create({ model: claude, max_tokens: 32, messages: hello });
    return { text: m.content[0].text, outputTokens: m.usage.output_tokens };
  },
  "anthropic messages stream": async () => {
    const stream = anthropic.messages.stream({ model: claude, max_tokens: 32, messages: hello });
    let text = "";
    stream.on("text", (t) => { text += t; });
    const m = await stream.finalMessage();
    return { text, outputTokens: m.usage.output_tokens };
  },
  "anthropic count_tokens": async () => {
    const r = await anthropic.messages.countTokens({ model: claude, messages: hello });
    return { inputTokens: r.input_tokens };
  },
  "anthropic models.list": async () => {
    const ids = [];
    for await (const m of anthropic.models.list()) ids.push(m.id);
    return { ids };
  },
  "anthropic unknown key": () => expectError(() => new Anthropic({ baseURL: base, apiKey: "sk-unknown", maxRetries: 0 }).messages.create({ model: claude, max_tokens: 8, messages: hello }), Anthropic.AuthenticationError),
  "anthropic model not allowed": () => expectError(() => anthropic.messages.create({ model: denied, max_tokens: 8, messages: hello }), Anthropic.PermissionDeniedError),
  "vercel generateText chat": async () => {
    const r = await generateText({ model: vercelOpenAI.chat(chatModel), prompt: "hello", maxRetries: 0 });
    return { text: r.text, totalTokens: r.usage.totalTokens };
  },
  "vercel streamText chat": async () => {
    const r = streamText({ model: vercelOpenAI.chat(chatModel), prompt: "hello", maxRetries: 0, onError: ({ error }) => { throw error; } });
    let text = "";
    for await (const t of r.textStream) text += t;
    return { text, totalTokens: (await r.usage).totalTokens };
  },
  "vercel generateText responses": async () => {
    const r = await generateText({ model: vercelOpenAI.responses(chatModel), prompt: "hello", maxRetries: 0 });
    return { text: r.text, totalTokens: r.usage.totalTokens };
  },
  "vercel embed": async () => {
    const r = await embed({ model: vercelOpenAI.embedding(embeddingModel), value: "hello", maxRetries: 0 });
    return { dims: r.embedding.length };
  },
  "vercel streamText anthropic": async () => {
    const r = streamText({ model: vercelAnthropic(claude), prompt: "hello", maxOutputTokens: 64, maxRetries: 0, onError: ({ error }) => { throw error; } });
    let text = "";
    for await (const t of r.textStream) text += t;
    return { text, outputTokens: (await r.usage).outputTokens };
  },
};

// Results are marked: the AI SDK prints its own warnings to stdout.
const marker = "sluice-result ";
for (const [name, run] of Object.entries(scenarios)) {
  try {
    const detail = await run();
    console.log(marker + JSON.stringify({ name, ok: true, detail }));
  } catch (e) {
    console.log(marker + JSON.stringify({ name, ok: false, detail: String(e?.stack ?? e) }));
  }
}
