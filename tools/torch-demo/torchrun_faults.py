#!/usr/bin/python3
"""The same job and faults under torchrun's elastic agent, for comparison.

One node, two workers, `--max-restarts 3`, the example job. For each fault:
the time from the fault to the first training step after recovery, the
steps done again, and what torchrun said. torchrun only sees exits: a
stopped worker is never noticed (its peer waits in the collective until
the process group times out, 30 minutes by default), so that case reports
"not recovered" after --stop-wait seconds. With --max-restarts 0 the kill
case shows which rank torchrun's summary blames.

Run by tools/torch-demo/run.sh; prints a table and writes JSON (--json).
Debian's python3-torch only imports under /usr/bin/python3.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(REPO, "examples", "torch-gpt", "train.py")
TORCHRUN = os.path.join(REPO, "examples", "torch-gpt", "torchrun.py")
ITERATION = re.compile(r"iteration\s+(\d+)\s*/")
STARTING = re.compile(r"starting at step (\d+)")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """torchrun with its output read line by line, each line timestamped."""

    def __init__(self, workdir, max_restarts, steps):
        self.lines = []
        self.lock = threading.Lock()
        args = [sys.executable, TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2",
                "--max-restarts", str(max_restarts), "--monitor-interval", "1",
                "--master_port", str(free_port()), TRAIN,
                "--steps", str(steps), "--checkpoint-every", "20",
                "--checkpoint-dir", os.path.join(workdir, "ck"),
                "--step-sleep", "0.08", "--fail-file", os.path.join(workdir, "fail")]
        self.workdir = workdir
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, cwd=workdir)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.time(), line.rstrip("\n")))

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def max_iteration(self, before=None):
        best = 0
        for at, line in self.snapshot():
            m = ITERATION.search(line)
            if m and (before is None or at <= before):
                best = max(best, int(m.group(1)))
        return best

    def wait_iteration(self, n, within=120):
        deadline = time.time() + within
        while time.time() < deadline:
            if self.max_iteration() >= n:
                return
            time.sleep(0.2)
        raise SystemExit(f"torchrun never reached iteration {n}")

    def worker_pid(self, rank):
        """The pid of the worker of `rank` (from its environment)."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                if b"train.py" not in cmd or b"torchrun.py" in cmd:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                if env.get(b"RANK") == str(rank).encode() and os.getsid(int(pid)) == os.getsid(self.proc.pid):
                    return int(pid)
            except (OSError, ValueError):
                continue
        raise SystemExit(f"no worker of rank {rank}")

    def recovery(self, fault_at, within):
        """(seconds to the first step after a restart, first step) or None."""
        deadline = fault_at + within
        while time.time() < deadline:
            restarted = False
            for at, line in self.snapshot():
                if at <= fault_at:
                    continue
                if STARTING.search(line):
                    restarted = True
                m = ITERATION.search(line)
                if restarted and m:
                    return at - fault_at, int(m.group(1))
            if self.proc.poll() is not None and not restarted:
                return None
            time.sleep(0.2)
        return None

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def text(self):
        return "\n".join(line for _, line in self.snapshot())


def fault(name, inject, max_restarts=3, within=60, steps=300):
    with tempfile.TemporaryDirectory() as workdir:
        run = Run(workdir, max_restarts, steps)
        try:
            run.wait_iteration(45)
            t = time.time()
            inject(run)
            got = run.recovery(t, within)
            before = run.max_iteration(before=t)
            if got is None:
                result = {"injected": name, "recovered": False,
                          "recover_s": None, "steps_redone": None}
            else:
                seconds, first = got
                result = {"injected": name, "recovered": True,
                          "recover_s": round(seconds, 2), "steps_redone": before - (first - 1)}
            if max_restarts == 0:
                run.proc.wait(timeout=60)
            text = run.text()
            root = text.split("Root Cause", 1)[-1] if "Root Cause" in text else ""
            blame = re.search(r"rank\s*:\s*(\d+)[\s\S]*?exitcode\s*:\s*(-?\d+)", root)
            result["torchrun_says"] = (
                f"root cause rank {blame.group(1)} (exitcode {blame.group(2)})" if blame
                else "; ".join(sorted({l.split("] ", 1)[-1][:120] for l in text.splitlines()
                                       if "Worker group FAILED" in l or "failed (exitcode" in l})) or "nothing")
            return result
        finally:
            run.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--stop-wait", type=float, default=60.0,
                   help="seconds to wait for recovery from a stopped worker")
    args = p.parse_args()
    results = [
        fault("kill -9 worker", lambda r: os.kill(r.worker_pid(1), signal.SIGKILL)),
        fault("SIGSTOP worker", lambda r: os.kill(r.worker_pid(1), signal.SIGSTOP), within=args.stop_wait),
        fault("exception in step", lambda r: open(os.path.join(r.workdir, "fail"), "w").close()),
        fault("kill -9 worker, --max-restarts 0 (whom the summary blames)",
              lambda r: os.kill(r.worker_pid(1), signal.SIGKILL), max_restarts=0, within=20),
    ]
    print(f"{'torchrun: injected':<58} {'recover_s':>9} {'redone':>6}  says")
    for r in results:
        rec = f"{r['recover_s']:.2f}" if r["recovered"] else "never"
        redone = r["steps_redone"] if r["steps_redone"] is not None else "-"
        print(f"{r['injected']:<58} {rec:>9} {redone:>6}  {r['torchrun_says']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"faults": results, "killed_rank": 1}, f, indent=2)


if __name__ == "__main__":
    main()
