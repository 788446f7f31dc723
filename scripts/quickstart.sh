#!/usr/bin/env bash
# make run: the quickstart on one machine with only Go installed.
#   - the mock LLM provider     127.0.0.1:8081   (sluice-dev llm)
#   - Sluice                    127.0.0.1:9001 gRPC, 127.0.0.1:9090 admin,
#                               127.0.0.1:18000 xDS
#   - the Envoy emulator        127.0.0.1:10000  (sluice-dev envoy), which takes
#                               its listener, routes and clusters from Sluice's
#                               xDS server, as a real Envoy does with
#                               envoy/bootstrap.yaml. EMULATOR=0 leaves it out,
#                               so that a real Envoy can take its place.
# bin/sluice is the production binary; the emulator and the mock come from
# bin/sluice-dev. Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SLUICE_BIN:-bin/sluice}
devbin=${SLUICE_DEV_BIN:-bin/sluice-dev}
config=${CONFIG:-examples/quickstart.yaml}
bootstrap=${BOOTSTRAP:-envoy/bootstrap.yaml}
emulator=${EMULATOR:-1}

# make run builds both binaries first; run on its own, this script builds
# what is missing the same way (saying so: a first build takes minutes).
if [ ! -x "$bin" ] || [ ! -x "$devbin" ]; then
  echo "quickstart: $bin or $devbin is missing; building them with make"
  make --no-print-directory build build-dev BIN="$bin" DEV_BIN="$devbin"
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$devbin" llm --addr 127.0.0.1:8081 &
pids+=($!)
if [ "$emulator" != 0 ]; then
  "$devbin" envoy --config "$bootstrap" &
  pids+=($!)
fi

cat <<MSG

Try it. On the first run Sluice prints a demo key below, once, as a line
"export KEY=sk-sluice-…": run that line in the shell you send requests from.
(Later runs keep the key it stored; a new one: $bin keys create --config $config --team demo)

  curl -s http://127.0.0.1:10000/v1/chat/completions -H "authorization: Bearer \$KEY" \\
       -H 'content-type: application/json' \\
       -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello!"}]}'

MSG
"$bin" serve --config "$config" --demo-key &
pids+=($!)
wait -n "${pids[@]}"
