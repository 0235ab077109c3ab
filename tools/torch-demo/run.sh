#!/usr/bin/env bash
# The real-PyTorch demo: `unicron up --no-sim` and four `unicron agent`s
# train two jobs of the example GPT (examples/torch-gpt) on this machine,
# with an in-memory snapshot every step held by the agents and replicated
# to a peer; five faults are injected one at a time (kill -9 of a worker,
# SIGSTOP of a worker, kill -9 of a whole node with the checkpoints
# deleted, an exception in the training step, kill -9 in the middle of a
# snapshot), and each is reported: detected kind, action, detection delay,
# time to the first step after recovery, the agents' restore time, where
# each rank's state came from (memory, replica:<node>, checkpoint) and the
# steps done again; and the job's snapshot overhead. Then one job on three
# of four checked nodes with a hot spare: a straggler (one worker held back
# by a CPU quota) swapped for the spare, and a whole node lost with the
# spare taking its rank (step time before / during / after, world size
# after, and the job's goodput split). Then the same job and faults under
# torchrun's elastic agent (--max-restarts 3, disk checkpoints every 20
# steps) for comparison.
#
#   tools/torch-demo/run.sh [--json FILE]
#
# The scenarios are the end-to-end tests services/unicron/tests/agent_torch.rs
# and agent_full_speed.rs, which assert every step; this script runs them
# and prints their numbers.
# Needs Debian's python3-torch and py-spy (./dev test installs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json="$2"; shift 2 ;;
    *) echo "usage: $0 [--json FILE]" >&2; exit 2 ;;
  esac
done
# py-spy (stacks of stopped workers) is in ./dev's Python environment.
venv="${UNICRON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/unicron}/venv"
if [ -d "$venv/bin" ]; then
  export PATH="$venv/bin:$PATH"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== unicron: four agents, two jobs, five faults"
UNICRON_TORCH_DEMO_JSON="$work/unicron.json" \
  cargo test -q --release --workspace --test agent_torch -- --nocapture 2>&1 \
  | grep -v -E '^(running|test result|$)|has been running'
echo
echo "== unicron: one job at full speed: pre-flight checks, a spare, a straggler"
UNICRON_FULL_SPEED_JSON="$work/full_speed.json" \
  cargo test -q --release --workspace --test agent_full_speed -- --nocapture 2>&1 \
  | grep -v -E '^(running|test result|$)|has been running'
echo
echo "== torchrun's elastic agent, same job, same faults"
/usr/bin/python3 tools/torch-demo/torchrun_faults.py --json "$work/torchrun.json"

if [ -n "$json" ]; then
  /usr/bin/python3 - "$work/unicron.json" "$work/torchrun.json" "$work/full_speed.json" "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
report["torchrun"] = json.load(open(sys.argv[2]))
# The full-speed job's faults join the list; its goodput split is its own.
full_speed = json.load(open(sys.argv[3]))
report["faults"].extend(full_speed["faults"])
report["full_speed_goodput"] = full_speed["goodput"]
json.dump(report, open(sys.argv[4], "w"), indent=2)
PY
  echo "wrote $json"
fi
