// Package e2e holds Sluice's end-to-end tests: real HTTP clients drive
// Envoy — the emulator in envoy/envoytest, and also a real envoy binary
// when one is on PATH — which calls Sluice's real gRPC services and
// forwards to the mock LLM provider in bench/mockllm. docs/testing.md
// explains how to write one.
package e2e
