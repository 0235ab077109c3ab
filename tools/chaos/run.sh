#!/usr/bin/env bash
# The chaos scenario (docs/chaos.md): unicron's services as separate
# processes on a three-broker Apache Kafka cluster (the jars `./dev setup
# test` fetches), SIGKILLed while they work, with a leader broker killed
# and a rolling restart of every broker.
# usage: tools/chaos/run.sh [--minutes N] [--kills N] [--seed N] [--work-dir DIR]
#                           [--kafka-libs DIR] [--no-broker-faults]
# Its second line names the brokers. The last line is `chaos: kills=K
# failures=F actions=A duplicates_suppressed=S duplicate_actions=D lost=L
# divergence=V`; exit 0 only when D, L and V are 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release --quiet -p unicron -p unicron-chaos
exec "$target/release/unicron-chaos" --unicron "$target/release/unicron" "$@"
