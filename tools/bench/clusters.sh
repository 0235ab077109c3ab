#!/usr/bin/env bash
# Many clusters on one planner service, failures at a multiple of the
# paper setting's rate:
#
#   tools/bench/clusters.sh [--pipeline [--kill-broker-after-minutes K] [--detectors N]
#                            [--add-detector-after-minutes K] | --planners N
#                            [--kill-after-minutes K] [--replay]]
#                           [--kafka | --broker-process | --brokers HOST:PORT]
#                           [--clusters N] [--gpus-per-cluster G] [--minutes M]
#                           [--rate X] [--speed S] [--sample-s S]
#                           [--warmup-minutes W] [--repair-s R] [--json FILE]
#                           [--flood X [--flood-after-minutes K] [--flood-minutes M]]
#                           [--cluster-topics [--budget-records-per-s R]]
#
# --planners N: N `unicron planner` processes in one group (a broker of
# their own: --kafka or --brokers), one SIGKILLed and restarted K minutes
# into the failures; --replay also runs `unicron replay` on the whole log at
# the end. Default: the planner alone, failures fed straight to it.
# --pipeline: every node heartbeats each second and failures arrive as the
# simulator's evidence, through the detector and the planner. The broker is
# the embedded one unless --kafka starts a three-broker Apache Kafka
# cluster (KRaft, the jars `./dev setup test` fetches; replication 3,
# min.insync.replicas 2) on loopback for the run, or --brokers names a
# Kafka-protocol broker. --kill-broker-after-minutes K (with --pipeline and
# --kafka) SIGKILLs the broker leading the failures topic's first
# partition K minutes into the failures and restarts it 20 s later; the
# result then splits failure -> command by before, during and after.
# --detectors N runs N detector instances in one group (in this process);
# --add-detector-after-minutes K starts one more K minutes into the
# failures, so the group rebalances under load.
# --flood X (with --pipeline): the first cluster sends X times its normal
# rate (benign log lines on top of its heartbeats) for M minutes (default
# 1), K minutes into the failures (default 1); the result then splits the
# other clusters' failure -> command and evidence -> command by before,
# during and after the flood.
# --cluster-topics (with --pipeline): each cluster writes its own topics
# (`kafka.cluster_topics`) and an in-process `unicron ingress` passes them
# on, holding each cluster to --budget-records-per-s (default: the
# shipped budget); the result adds what it forwarded and dropped.
# --broker-process runs the embedded broker in a process of its own, so
# the measured process's memory is the services' alone.
#
# Defaults: 100 clusters x 1,024 GPUs, 16 jobs each, 10x the paper rate,
# x10 speed, 2 minutes. Prints one JSON object
# (tests/benches/clusters/main.rs says what each field measures)
# and exits 1 if any failure produced was never answered.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/unicron-release}"

args=()
broker_process=""
for arg in "$@"; do
  case "$arg" in
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
  cargo bench -q -p unicron-tests --bench clusters --no-run
  work="$(mktemp -d)"
  cargo bench -q -p unicron-tests --bench clusters -- --serve-broker >"$work/broker" 2>&1 &
  cargo_pid=$!
  trap 'kill "$(awk "{print \$4}" "$work/broker")" 2>/dev/null; wait "$cargo_pid" 2>/dev/null; rm -rf "$work"' EXIT
  for _ in $(seq 1 300); do
    grep -q "^broker: " "$work/broker" && break
    sleep 0.1
  done
  read -r _ address _ pid <"$work/broker"
  echo "embedded broker in process $pid on $address" >&2
  cargo bench -q -p unicron-tests --bench clusters -- \
    --brokers "$address" --mock-broker --broker-pid "$pid" "${args[@]}"
  exit
fi

exec cargo bench -q -p unicron-tests --bench clusters -- "${args[@]}"
