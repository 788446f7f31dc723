// Package devcmd owns the sluice-dev command line: the development and
// test tools that must never ship in the production sluice binary — the
// Envoy emulator (envoy/envoytest) and the mock LLM provider
// (bench/mockllm), each run as a process for demos, `make run` and
// clients such as curl or an SDK.
//
// It only parses flags and runs those two (and prints its version); it
// holds no gateway logic and nothing of Sluice's imports it. Run takes
// everything from its arguments, so tests call it like main does.
package devcmd
