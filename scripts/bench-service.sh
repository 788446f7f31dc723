#!/usr/bin/env bash
# make bench-service: the whole-service benchmark over gRPC (bench/README.md,
# "Whole service over gRPC"). Starts `sluice serve` on a fresh copy of
# bench/extprocload/bench.yaml and the do-nothing floor server (and, with
# BASELINE_BIN, another build of Sluice beside them), runs every
# scenario of bench/extprocload against each in turn, and prints one JSON
# line per run (a ramp: one per step and a summary). The
# lines are also written to RESULTS, and the charts drawn from them into
# its directory (extprocload chart).
#
# With taskset and at least 2 CPUs, the server runs on CPU 0 and the driver
# on CPU 1, so the driver's own work does not land in the server's CPU
# time (which is read from /proc/<pid>/stat either way).
#   DURATION=3s       override every scenario's duration (not the ramp's steps)
#   RAMP_STEP=2s      override the ramp's step (default 20s)
#   SCENARIOS="..."   the scenarios to run (default: all)
#   SERVERS="..."     of sluice, baseline and floor (default: sluice floor)
#   BASELINE_BIN=FILE the `sluice` binary the server `baseline` runs: another
#                     build beside the current one in the same run (e.g. one
#                     built in a git worktree of an older commit); it gets the
#                     same bench.yaml copy (and the same KEYS_FROM, STORE_FROM,
#                     LEDGER_FROM) as sluice
#   TLS=1             mTLS on every server, as Envoy would speak it to Sluice:
#                     `extprocload certs` makes a throwaway CA, a server
#                     certificate (sluice.bench, 127.0.0.1, spiffe://bench/sluice)
#                     and a client one (spiffe://bench/envoy); Sluice's copy of
#                     bench.yaml gets security.tls with client_ca_file and
#                     allowed_clients, the floor the same certificate and CA,
#                     and the driver the client certificate. Results are
#                     labelled sluice-mtls, floor-mtls, baseline-mtls. A
#                     baseline older than security.tls cannot start so.
#   RESULTS=FILE      where the JSON lines go (default bench/results/latest.jsonl)
#   LEDGER_POSTGRES=URL  the spend ledger in this PostgreSQL database
#                     (ledger.postgres, its spool beside the config; serve
#                     --migrate), not the SQLite file: results labelled
#                     sluice-pg (baseline-pg); see bench/README.md,
#                     "The PostgreSQL ledger", for a throwaway database
#   ADMISSION_REDIS=URL  count limits and budgets in this Redis
#                     (admission.redis), not in process: results labelled
#                     sluice-redis; after each scenario the Redis round trips
#                     a request took (EVALSHA calls, from the server's
#                     command stats, over the requests served) go to stderr.
#                     Flushed (FLUSHALL) before each scenario; see
#                     bench/README.md, "Admission in Redis"
#   LEDGER_FROM=FILE  start Sluice on a copy of this ledger file (e.g. one
#                     `extprocload prefill --ledger FILE --records 10000000`
#                     filled), to see what the ledger's size costs
#   RUN_FLAGS="..."   more `extprocload run` flags for every scenario
#                     (e.g. "--interval 250ms": streams-2000 paced so that
#                     2,000 streams stay open without overloading the machine)
#   SERVER_ENV="..."  environment for the server alone (e.g.
#                     "GOMEMLIMIT=75MiB"; the driver keeps its own)
#   KEYS_FROM=FILE    declare, beside bench.yaml's own, the teams and keys
#                     of this sluice.yaml (e.g. the one `go run
#                     ./bench/keyscale --keys 100000 --mode declared
#                     --runs 1 --dir D` leaves in D/declared-100000)
#   STORE_FROM=FILE   start Sluice on a copy of this key store (e.g. the
#                     store.db `go run ./bench/keyscale --keys 100000
#                     --mode store --runs 1 --dir D` leaves in
#                     D/store-100000), to see what many keys cost beside
#                     the load; bench.yaml's own key is declared, so it
#                     works with any store
set -euo pipefail
cd "$(dirname "$0")/.."
sluice=${SLUICE_BIN:-bin/sluice}
driver=${DRIVER_BIN:-bin/extprocload}
scenarios=${SCENARIOS:-open-200rps open-1000rps streams-50x20 streams-2000 closed-max closed-64 closed-streams fallback ramp}
servers=${SERVERS:-sluice floor}
key=sk-sluice-BenchOnlyNotASecret000000000000000000000000   # bench.yaml declares its sha256

tls_on=
case ${TLS:-} in ''|0) ;; *) tls_on=1 ;; esac
for server in $servers; do
  case $server in
    sluice|floor) ;;
    baseline)
      if [ -z "${BASELINE_BIN:-}" ]; then echo "bench-service: server baseline needs BASELINE_BIN" >&2; exit 2; fi ;;
    *) echo "bench-service: unknown server $server" >&2; exit 2 ;;
  esac
done

server_pin=() driver_pin=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
  server_pin=(taskset -c 0) driver_pin=(taskset -c 1)
fi
results=${RESULTS:-bench/results/latest.jsonl}
mkdir -p "$(dirname "$results")"
: >"$results"

tmp=$(mktemp -d)
declare -A pids=() addrs=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# wait_ready polls for the ready file a server writes once listening.
wait_ready() { # server pid
  for _ in $(seq 200); do
    if [ -s "$tmp/$1/ready.json" ]; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then echo "bench-service: $1 exited; its log:" >&2; cat "$tmp/$1/server.log" >&2; return 1; fi
    sleep 0.05
  done
  echo "bench-service: $1 not ready after 10s" >&2
  return 1
}

# write_config writes the copy of bench.yaml a Sluice build serves into
# its directory, with KEYS_FROM's keys and, with TLS, security.tls.
write_config() { # dir
  if [ -n "${KEYS_FROM:-}" ]; then
    # KEYS_FROM's team items go first under bench.yaml's teams:, its
    # key items after bench.yaml's, which end the file.
    section() { awk -v want="$1" '/^[a-z_]+:/ { sec = $0; sub(/:.*/, "", sec); next } sec == want' "$KEYS_FROM"; }
    {
      sed '/^teams:/q' bench/extprocload/bench.yaml
      section teams
      sed '1,/^teams:/d' bench/extprocload/bench.yaml
      section keys
    } >"$1/bench.yaml"
  else
    cp bench/extprocload/bench.yaml "$1/bench.yaml"
  fi
  if [ -n "${LEDGER_POSTGRES:-}" ]; then
    sed -i "s|^  sqlite: bench-ledger.db\$|  postgres: \"$LEDGER_POSTGRES\"\\n  spool: bench-ledger-spool|" "$1/bench.yaml"
    grep -q '^  postgres:' "$1/bench.yaml" || { echo "bench-service: bench.yaml's ledger section moved; update LEDGER_POSTGRES's edit" >&2; exit 2; }
  fi
  if [ -n "${ADMISSION_REDIS:-}" ]; then
    printf '\nadmission: {redis: "%s"}\n' "$ADMISSION_REDIS" >>"$1/bench.yaml"
  fi
  if [ -n "$tls_on" ]; then
    cat >>"$1/bench.yaml" <<EOF

security:
  tls:
    cert_file: $certs/server.crt
    key_file: $certs/server.key
    client_ca_file: $certs/ca.crt
    allowed_clients: {uris: [spiffe://bench/envoy]}
EOF
  fi
}

tls_driver=() tls_floor=() label_suffix= serve_flags=()
if [ -n "${LEDGER_POSTGRES:-}" ]; then
  serve_flags=(--migrate)
fi
if [ -n "$tls_on" ]; then
  certs=$tmp/certs
  "$driver" certs --dir "$certs" >/dev/null
  tls_driver=(--tls-ca "$certs/ca.crt" --tls-cert "$certs/client.crt" --tls-key "$certs/client.key" --tls-server-name sluice.bench)
  tls_floor=(--tls-cert "$certs/server.crt" --tls-key "$certs/server.key" --tls-client-ca "$certs/ca.crt")
  label_suffix=-mtls
fi
ledger_suffix=
if [ -n "${LEDGER_POSTGRES:-}" ]; then ledger_suffix=-pg; fi
if [ -n "${ADMISSION_REDIS:-}" ]; then ledger_suffix=$ledger_suffix-redis; fi
# evalsha_calls is how many EVALSHA the Redis of ADMISSION_REDIS has run.
evalsha_calls() {
  redis-cli -u "$ADMISSION_REDIS" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | tr -d '\r'
}

# Every server is started first, and each scenario runs against each
# server in turn, so a scenario's runs are minutes closer together than
# a whole server's set would leave them: this machine's speed drifts
# from one quarter hour to the next, and the pair is the comparison. An
# idle server waits in its accept and reads; nothing of it runs.
for server in $servers; do
  dir=$tmp/$server
  mkdir -p "$dir"
  case $server in
    sluice|baseline)
      bin=$sluice
      if [ "$server" = baseline ]; then bin=$BASELINE_BIN; fi
      write_config "$dir"
      # sync: the copy's dirty pages must not be written back during the run
      if [ -n "${LEDGER_FROM:-}" ]; then cp "$LEDGER_FROM" "$dir/bench-ledger.db"; sync; fi
      if [ -n "${STORE_FROM:-}" ]; then cp "$STORE_FROM" "$dir/bench.db"; sync; fi
      # shellcheck disable=SC2086 # SERVER_ENV is split into words on purpose
      env ${SERVER_ENV:-} "${server_pin[@]}" "$bin" serve --config "$dir/bench.yaml" --ready-file "$dir/ready.json" --log-level warn "${serve_flags[@]}" >"$dir/server.log" 2>&1 &
      ;;
    floor)
      # shellcheck disable=SC2086 # as above
      env ${SERVER_ENV:-} "${server_pin[@]}" "$driver" floor --addr 127.0.0.1:0 --ready-file "$dir/ready.json" "${tls_floor[@]}" >"$dir/server.log" 2>&1 &
      ;;
  esac
  pids[$server]=$!
  wait_ready "$server" "${pids[$server]}"
  addrs[$server]=$(sed 's/.*"grpc": *"\([^"]*\)".*/\1/' "$dir/ready.json")
done

for s in $scenarios; do
  extra=()
  if [ "$s" = ramp ]; then
    if [ -n "${RAMP_STEP:-}" ]; then extra=(--step "$RAMP_STEP"); fi
  elif [ -n "${DURATION:-}" ]; then
    extra=(--duration "$DURATION")
  fi
  # shellcheck disable=SC2206 # RUN_FLAGS is split into words on purpose
  extra+=(${RUN_FLAGS:-})
  for server in $servers; do
    label=$server$label_suffix
    case $server in sluice|baseline) label=$server$ledger_suffix$label_suffix ;; esac
    redis_before=
    if [ -n "${ADMISSION_REDIS:-}" ] && [ "$server" != floor ]; then
      redis-cli -u "$ADMISSION_REDIS" flushall >/dev/null
      redis_before=$(evalsha_calls); redis_before=${redis_before:-0}
    fi
    "${driver_pin[@]}" "$driver" run --addr "${addrs[$server]}" --pid "${pids[$server]}" --key "$key" --server "$label" --scenario "$s" "${tls_driver[@]}" "${extra[@]}" | tee -a "$results"
    if [ -n "$redis_before" ]; then
      calls=$(( $(evalsha_calls) - redis_before ))
      served=$(tail -n 1 "$results" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r.get("served") or r.get("requests") or 0)')
      echo "bench-service: $s on $label: $calls EVALSHA for $served requests served ($(python3 -c "print(round($calls/max($served,1),2))") a request)" >&2
    fi
  done
done
"$driver" chart --in "$results" --out "$(dirname "$results")"
