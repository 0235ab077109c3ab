#!/usr/bin/python3
"""A worker for tools/torch-demo/snapshot_bench.py: holds a state of
--mb megabytes (float32 tensors) and hands it to its unicron agent --saves
times through the client, --gap seconds apart, then prints what the
training thread paid per save and how long each took to reach the agent.
Then it idles until the agent stops it. Restarted after a failure, it
restores instead and prints how long that took, into its own tensors."""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "clients", "python"))
import unicron_client  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=100)
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--gap", type=float, default=3.0)
    args = p.parse_args()
    n = args.mb * (1 << 20) // 4
    chunks = max(1, args.mb // 64)
    state = {f"w{i}": torch.ones(n // chunks) for i in range(chunks)}
    client = unicron_client.default()
    if not client.active:
        raise SystemExit("not under a unicron agent")
    print(f"payload pid {os.getpid()}", flush=True)
    t0 = time.perf_counter()
    restored = client.restore()
    if restored is not None:
        # The state comes back as views of the agent's memory; one copy
        # puts it where the training reads it, as load_state_dict does.
        for name, t in state.items():
            t.copy_(restored.state["model"][name])
        ms = 1000 * (time.perf_counter() - t0)
        print(f"restore: {args.mb} MB from {restored.source} step {restored.step} "
              f"in {ms:.1f} ms", flush=True)
        print("payload done", flush=True)
        while True:
            time.sleep(60)
    # Odd ranks save half a gap later: each transfer is measured alone, not
    # against the other direction's on the same two cores.
    if int(os.environ.get("RANK", "0")) % 2:
        time.sleep(args.gap / 2)
    for step in range(1, args.saves + 1):
        t0 = time.perf_counter()
        client.save(step, {"step": step, "model": state})
        t1 = time.perf_counter()
        client.flush()
        t2 = time.perf_counter()
        print(f"save {step}: {args.mb} MB, training thread {1000 * (t1 - t0):.1f} ms, "
              f"at the agent after {1000 * (t2 - t0):.1f} ms", flush=True)
        time.sleep(args.gap)
    print("payload done", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
