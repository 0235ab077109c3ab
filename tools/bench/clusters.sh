#!/usr/bin/env bash
# Many clusters on one planner service, failures at a multiple of the
# paper setting's rate:
#
#   tools/bench/clusters.sh [--pipeline | --planners N [--kill-after-minutes K] [--replay]]
#                           [--tansu | --broker-process | --brokers HOST:PORT]
#                           [--clusters N] [--gpus-per-cluster G] [--minutes M]
#                           [--rate X] [--speed S] [--sample-s S]
#                           [--warmup-minutes W] [--repair-s R] [--json FILE]
#
# --planners N: N `unicron planner` processes in one group (a standalone
# broker only), one SIGKILLed and restarted K minutes into the failures;
# --replay also runs `unicron replay` on the whole log at the end.
# Default: the planner alone, failures fed straight to it. --pipeline: every
# node heartbeats each second and failures arrive as the simulator's
# evidence, through the detector and the planner. The broker is the
# embedded one unless --brokers names a Kafka-protocol broker, or --tansu
# starts tansu (the standalone broker of the test suite: $TANSU, else
# /var/cache/unicron-tools/bin/tansu) on a free loopback port with SQLite
# storage in a temporary directory, as tools/chaos and the standalone tests
# do (TANSU_STORAGE=memory://tansu/ for its in-memory storage), and stops
# it at the end. --broker-process runs the embedded broker in a process of
# its own, so the measured process's memory is the services' alone.
#
# Defaults: 100 clusters x 1,024 GPUs, 16 jobs each, 10x the paper rate,
# x10 speed, 2 minutes. Prints one JSON object
# (services/planner/benches/clusters/main.rs says what each field measures)
# and exits 1 if any failure produced was never answered.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/unicron-release}"

args=()
tansu=""
broker_process=""
for arg in "$@"; do
  case "$arg" in
    --tansu) tansu="${TANSU:-/var/cache/unicron-tools/bin/tansu}" ;;
    --broker-process) broker_process=1 ;;
    --planners) args+=("$arg" ); planners=1 ;;
    *) args+=("$arg") ;;
  esac
done
# Several planners run as `unicron planner` processes of this build.
if [ -n "${planners:-}" ]; then
  cargo build -q --release -p unicron
  args+=(--unicron "$CARGO_TARGET_DIR/release/unicron")
fi

if [ -n "$broker_process" ]; then
  cargo bench -q -p unicron-planner --bench clusters --no-run
  work="$(mktemp -d)"
  cargo bench -q -p unicron-planner --bench clusters -- --serve-broker >"$work/broker" 2>&1 &
  cargo_pid=$!
  trap 'kill "$(awk "{print \$4}" "$work/broker")" 2>/dev/null; wait "$cargo_pid" 2>/dev/null; rm -rf "$work"' EXIT
  for _ in $(seq 1 300); do
    grep -q "^broker: " "$work/broker" && break
    sleep 0.1
  done
  read -r _ address _ pid <"$work/broker"
  echo "embedded broker in process $pid on $address" >&2
  cargo bench -q -p unicron-planner --bench clusters -- \
    --brokers "$address" --mock-broker --broker-pid "$pid" "${args[@]}"
  exit
fi

if [ -z "$tansu" ]; then
  exec cargo bench -q -p unicron-planner --bench clusters -- "${args[@]}"
fi

[ -x "$tansu" ] || { echo "clusters.sh: no tansu at $tansu (set TANSU)" >&2; exit 2; }
# Built before tansu starts, so a long build does not hold the broker idle.
cargo bench -q -p unicron-planner --bench clusters --no-run
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="tcp://127.0.0.1:$port"
# tansu opens its SQLite path relative to its working directory.
(cd "$work" && exec "$tansu" broker --listener-url "$url" --advertised-listener-url "$url" \
  --storage-engine "${TANSU_STORAGE:-sqlite://tansu.db}") >"$work/tansu.log" 2>&1 &
tansu_pid=$!
trap 'kill "$tansu_pid" 2>/dev/null; wait "$tansu_pid" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  kill -0 "$tansu_pid" 2>/dev/null || { cat "$work/tansu.log" >&2; exit 2; }
  sleep 0.1
done
echo "tansu $("$tansu" --version 2>/dev/null | head -1) on 127.0.0.1:$port (pid $tansu_pid)" >&2
cargo bench -q -p unicron-planner --bench clusters -- \
  --brokers "127.0.0.1:$port" --broker-pid "$tansu_pid" --broker-label tansu "${args[@]}"
