#!/usr/bin/env bash
# Many clusters on one planner service (embedded broker), failures fed
# straight to it at a multiple of the paper setting's rate:
#
#   tools/bench/clusters.sh [--clusters N] [--gpus-per-cluster G] [--minutes M]
#                           [--rate X] [--speed S] [--json FILE]
#
# Defaults: 100 clusters x 1,024 GPUs, 16 jobs each, 10x the paper rate,
# event time 10x real time, 2 minutes. Prints one JSON object
# (services/planner/benches/clusters.rs says what each field measures) and
# exits 1 if any failure produced was never decided.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/unicron-release}"
exec cargo bench -q -p unicron-planner --bench clusters -- "$@"
