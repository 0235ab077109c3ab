#!/usr/bin/env bash
# Runs every benchmark (release builds) and writes docs/BENCHMARKS.md from
# what they print: machine, date, commit, the raw transport rate as the
# reference line, each stage as a fraction of it, then every table. Nothing
# in that file is typed in by hand.
#
#   tools/bench/run.sh [OUT.md]        default docs/BENCHMARKS.md
#
# Takes 25-35 minutes on 2 cores with warm builds (the first release build
# of RocksDB and librdkafka adds about 20). CARGO_TARGET_DIR defaults to a
# cache outside the checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/unicron-release}"
out="${1:-docs/BENCHMARKS.md}"
work="$(mktemp -d)"
# Kept when a benchmark fails, so what the others printed is not lost.
trap 'if [ $? -eq 0 ]; then rm -rf "$work"; else echo "outputs kept in $work" >&2; fi' EXIT

bench() { # name, cargo bench arguments...
  local name="$1"
  shift
  echo "bench: $name" >&2
  cargo bench -q "$@" >"$work/$name.out"
}

bench transport -p unicron-tests --bench transport
bench detector -p unicron-tests --bench detector_pipeline
bench heartbeats -p unicron-tests --bench detector_heartbeats
bench classify -p unicron-tests --bench classify_lines
bench new_topic -p unicron-tests --bench new_topic
echo "bench: rsyslog and Prometheus in front of the detector" >&2
{
  echo "| path | measured |"
  echo "|---|---|"
  cargo test -q --release -p unicron-detector --test rsyslog -- --nocapture --test-threads 1 2>&1 \
    | sed -n 's/^rsyslog: \(.*\)/| rsyslog line → failure | \1 |/p'
  cargo test -q --release -p unicron --test prometheus_remote_write -- --nocapture 2>&1 \
    | sed -n 's/^page change -> \(.*\)/| Prometheus scrape → failure | \1 |/p'
} >"$work/pipelines.out"
bench plan -p unicron-tests --bench plan_time
bench failure_to_command -p unicron-planner --bench failure_to_command
bench offline -p unicron-tests --bench offline_loop
bench evaluation -p unicron-tests --bench evaluation
bench replay -p unicron-tests --bench replay_archive

echo "bench: end to end (unicron up, 60 s)" >&2
cargo build -q --release -p unicron
"$CARGO_TARGET_DIR/release/unicron" up --trace tools/traces/example.csv --duration 60s \
  --no-archive --summary-json "$work/up.json" >"$work/up.out" 2>/dev/null

echo "bench: many clusters on one planner (about 15 min)" >&2
tools/bench/clusters.sh --clusters 100 --minutes 5 --json "$work/clusters-100.json" >/dev/null
tools/bench/clusters.sh --clusters 300 --minutes 5 --json "$work/clusters-300.json" >/dev/null

# The whole pipeline needs a real broker: the embedded one drops records
# past 5 MB a partition, and 12,800 heartbeats a second fill that. Apache
# Kafka, three brokers, one of them killed and restarted in the middle.
echo "bench: the whole pipeline through Apache Kafka, 100 clusters (about 13 min)" >&2
tools/bench/clusters.sh --pipeline --kafka --clusters 100 --minutes 10 \
  --kill-broker-after-minutes 5 --json "$work/pipeline-100.json" >/dev/null

echo "bench: the node agent's cost (40 s)" >&2
python3 tools/bench/agent.py --unicron "$CARGO_TARGET_DIR/release/unicron" >"$work/agent.out"

echo "bench: real PyTorch, unicron agent and torchrun (about 5 min)" >&2
tools/torch-demo/run.sh --json "$work/torch.json" >"$work/torch.out"

echo "bench: in-memory snapshots, overhead and replica transfer (about 3 min)" >&2
/usr/bin/python3 tools/torch-demo/snapshot_bench.py --unicron "$CARGO_TARGET_DIR/release/unicron" \
  --json "$work/snapshots.json" >"$work/snapshots.out"

echo "bench: a real Slurm, unicron and Slurm's own requeue (about 6 min)" >&2
tools/slurm-demo/run.sh --json "$work/slurm.json" >"$work/slurm.out"

echo "bench: a real Kubernetes control plane, five faults (about 3 min)" >&2
tools/kubernetes/run.sh --json "$work/kubernetes.json" >"$work/kubernetes.out"

# Sustained load through Apache Kafka; 10 minutes.
echo "bench: sustained load through Apache Kafka (10 min)" >&2
cargo build -q --release -p unicron-chaos --bin unicron-kafka
python3 tools/bench/sustained.py --unicron "$CARGO_TARGET_DIR/release/unicron" \
  --kafka "$CARGO_TARGET_DIR/release/unicron-kafka" >"$work/sustained.md"

python3 tools/bench/report.py "$work" >"$out"
echo "wrote $out" >&2
