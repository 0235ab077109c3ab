#!/usr/bin/env bash
# The Slurm measurements: a real Slurm 22.05 (Debian's slurm-wlm, a
# controller and three `slurmd -N nX` on this machine) runs the example GPT
# under `unicron agent`. Reported: fault line to DRAIN in Slurm and to the
# first training step on the remaining nodes; node loss to detection and to
# training again; Slurm's own verdict on the dead node; and, for
# comparison, Slurm's own path for a job without unicron: `scontrol
# requeue` to the first training step of the requeued run, with Slurm's
# default credential lifetime (120 s; the tests use 10 s).
#
#   tools/slurm-demo/run.sh [--json FILE]
#
# The scenarios are the tests in services/unicron/tests/slurm.rs, which
# assert every step; this script runs them and prints their numbers. Needs
# slurm-wlm, munge and python3-torch (./dev test installs them) and root
# (the daemons run as the current user, which must be able to start them).
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

UNICRON_SLURM_DEMO_JSON="$work/unicron.json" \
UNICRON_SLURM_REQUEUE_JSON="$work/requeue.json" \
UNICRON_SLURM_CRED_EXPIRE_S="${UNICRON_SLURM_CRED_EXPIRE_S:-120}" \
  cargo test -q --release --workspace --test slurm -- --nocapture 2>&1 \
  | grep -E '^(ecc|node loss|slurm|test |decisions|failures)'

if [ -n "$json" ]; then
  python3 - "$work/unicron.json" "$work/requeue.json" "$json" <<'PY'
import json, sys
unicron, requeue, out = sys.argv[1:]
with open(unicron) as f:
    report = json.load(f)
with open(requeue) as f:
    report["requeue"] = json.load(f)
with open(out, "w") as f:
    json.dump(report, f, indent=2)
PY
fi
