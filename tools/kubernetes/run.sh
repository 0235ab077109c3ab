#!/usr/bin/env bash
# The Kubernetes measurements: a real control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler built from tools/kubernetes/go.mod,
# kwok's fake GPU nodes) with two training workloads planned by unicron,
# and five faults: a GPU node condition, a container OOMKilled, a node an
# operator cordons, a pod someone else evicts, a node whose heartbeat
# stops. Reported per fault: what was detected, the action, fault →
# detection, → the API write that carries it out, → the pod gone from the
# node, and what Kubernetes alone does; then the replay of the run.
#
#   tools/kubernetes/run.sh [--json FILE]
#
# The scenario is services/unicron/tests/kubernetes.rs, which asserts every
# step (every fault acted on through the API server, node loss → cordon and
# eviction within 5 s of detection, no pod on an isolated node afterwards,
# replay without divergence); this script runs it and prints its numbers.
# Needs the control plane ./dev test builds (UNICRON_KUBERNETES_BIN, or
# ~/.cache/unicron).
set -euo pipefail
cd "$(dirname "$0")/../.."
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json="$2"; shift 2 ;;
    *) echo "usage: $0 [--json FILE]" >&2; exit 2 ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
UNICRON_KUBERNETES_JSON="$work/kubernetes.json" \
  cargo test --release -p unicron --test kubernetes -- --nocapture >"$work/test.log" 2>&1 || {
  tail -40 "$work/test.log" >&2
  echo "run.sh: the Kubernetes scenario failed (log above)" >&2
  exit 1
}
if [ -n "$json" ]; then
  cp "$work/kubernetes.json" "$json"
fi
cat "$work/kubernetes.json"
