#!/usr/bin/env bash
# Whole-service A/B: several Sluice builds (or one build under several
# environments) served side by side, each scenario run against each in
# turn, ROUNDS times, so the variants interleave and the machine's drift
# falls on all of them alike (bench/README.md, "Performance machinery:
# with and without"). The server runs on CPU 0, the driver on CPU 1.
#
#   VARIANTS="name=BIN[,VAR=VALUE...] ..."  BIN "floor" is the do-nothing server
#   ROUNDS=3  SCENARIOS="closed-max closed-streams streams-2000"
#   OUT=bench/results/ab.jsonl   (the runs; OUT.mem the idle and final RssAnon)
#
# streams-2000 runs paced (--interval 250ms --duration 8s), as in "Memory
# with 100,000 keys and 2,000 open streams". Print the medians with
# scripts/bench-ab-medians.py OUT name,name,...
set -euo pipefail
cd "$(dirname "$0")/.."
driver=${DRIVER_BIN:-bin/extprocload}
[ -x "$driver" ] || go build -o "$driver" ./bench/extprocload
key=sk-sluice-BenchOnlyNotASecret000000000000000000000000 # bench.yaml declares its sha256
out=${OUT:-bench/results/ab.jsonl}
mkdir -p "$(dirname "$out")"
: >"$out"
: >"$out.mem"
pin0=() pin1=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then pin0=(taskset -c 0) pin1=(taskset -c 1); fi
tmp=$(mktemp -d)
declare -A pids addrs
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
for spec in ${VARIANTS:?VARIANTS=\"name=BIN[,VAR=VALUE...] ...\"}; do
  name=${spec%%=*} rest=${spec#*=}
  bin=${rest%%,*} envs=()
  if [[ $rest == *,* ]]; then IFS=, read -ra envs <<<"${rest#*,}"; fi
  d=$tmp/$name
  mkdir -p "$d"
  if [ "$bin" = floor ]; then
    "${pin0[@]}" "$driver" floor --addr 127.0.0.1:0 --ready-file "$d/ready.json" >"$d/log" 2>&1 &
  else
    cp bench/extprocload/bench.yaml "$d/bench.yaml"
    bin=$(realpath "$bin")
    (cd "$d" && exec env "${envs[@]}" "${pin0[@]}" "$bin" serve --config "$d/bench.yaml" --ready-file "$d/ready.json" --log-level warn >"$d/log" 2>&1) &
  fi
  pids[$name]=$!
  for _ in $(seq 400); do [ -s "$d/ready.json" ] && break; sleep 0.05; done
  if [ ! -s "$d/ready.json" ]; then echo "bench-ab: $name did not start; its log:" >&2; cat "$d/log" >&2; exit 1; fi
  addrs[$name]=$(sed 's/.*"grpc": *"\([^"]*\)".*/\1/' "$d/ready.json")
done
anon() { awk '/^RssAnon:/{print $2}' "/proc/$1/status"; }
sleep 3
for name in "${!pids[@]}"; do echo "{\"idle\":\"$name\",\"rss_anon_kib\":$(anon "${pids[$name]}")}" >>"$out.mem"; done
for r in $(seq "${ROUNDS:-3}"); do
  for s in ${SCENARIOS:-closed-max closed-streams streams-2000}; do
    extra=()
    if [ "$s" = streams-2000 ]; then extra=(--interval 250ms --duration 8s); fi
    for spec in $VARIANTS; do
      name=${spec%%=*}
      echo "bench-ab: round $r, $s, $name" >&2
      "${pin1[@]}" "$driver" run --addr "${addrs[$name]}" --pid "${pids[$name]}" --key "$key" --server "$name" --scenario "$s" "${extra[@]}" >>"$out"
    done
  done
done
for name in "${!pids[@]}"; do echo "{\"after\":\"$name\",\"rss_anon_kib\":$(anon "${pids[$name]}")}" >>"$out.mem"; done
