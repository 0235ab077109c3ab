#!/usr/bin/python3
"""Benchmarks of in-memory snapshots on this machine, with the real pieces:
`unicron up --no-sim` (embedded broker, detector, planner) and two
`unicron agent`s with replication on, each one node of one worker.

1. What a snapshot every step costs the example job: its mean iteration
   time with `--snapshot-every 1` against `--snapshot-every 0`, same seed,
   two ranks (each agent also replicates to the other).
2. Replica transfer: a worker hands its agent a state of 100 MB and 1 GB
   eight times (tools/torch-demo/snapshot_payload.py; the medians are of
   saves 5-8 and their replicas, when the worker's slots and the receiving
   agent's memory are reused, and the two workers save
   half a gap apart); the agent sends it to its peer over TCP on loopback. MB/s of that send, against `cp` of the same bytes
   to /dev/shm.
3. `sizes`: per state size, what a save costs (`save_block_s`: the
   training thread in save(); `at_agent_s`: until the agent holds it;
   `replica_s`: the peer's copy; `restore_s`: a restarted worker's
   restore() from its agent and the copy into its tensors, after the
   bench kills one worker and the planner restarts the job) against two
   baselines measured in the same
   run: `copy_s`, one in-process copy of the same tensors into a buffer
   allocated before, and `socket_s`, the same bytes through a plain
   loopback TCP socket between two processes.

    tools/torch-demo/snapshot_bench.py [--unicron target/release/unicron] [--json FILE]

Debian's python3-torch only imports under /usr/bin/python3.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
ITER_MS = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*elapsed time per iteration \(ms\): ([0-9.]+)")
REPLICA = re.compile(r"replica sent.*?bytes=(\d+) seconds=([0-9.e-]+)")
SAVE = re.compile(r"save (\d+): (\d+) MB, training thread ([0-9.]+) ms, at the agent after ([0-9.]+) ms")
RESTORE = re.compile(r"restore: \d+ MB from (\S+) step \d+ in ([0-9.]+) ms")
PID = re.compile(r"payload pid (\d+)")


def wait(what, check, within=120):
    deadline = time.time() + within
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


class Cluster:
    """`unicron up --no-sim` and two agents running one job."""

    def __init__(self, unicron, job, command, memory_limit=8 << 30):
        self.dir = tempfile.mkdtemp(prefix="unicron-snapbench-")
        self.procs = []
        run = os.path.join(self.dir, "run")
        self.procs.append(self.spawn([unicron, "up", "--no-sim", "--archive", run], "up"))
        wait("the broker", lambda: os.path.exists(os.path.join(run, "planner.pub")))
        brokers = open(os.path.join(run, "brokers")).read().strip()
        with open(os.path.join(self.dir, "secret"), "w") as f:
            f.write("snapshot-bench-secret-of-32-bytes-at-least\n")
        with open(os.path.join(self.dir, "agent.toml"), "w") as f:
            f.write(f"""[metrics]
enabled = false

[agent]
cluster = "bench"
address = "127.0.0.1"
stop_grace_s = 1.0
snapshot_memory_limit = {memory_limit}
snapshot_secret_file = {json.dumps(os.path.join(self.dir, "secret"))}

[[agent.jobs]]
id = {json.dumps(job)}
min_nodes = 2
max_nodes = 2
master_port_base = 32600
command = {json.dumps(command)}
""")
        env = dict(os.environ, RUST_LOG="info,unicron_agent::snapshot::peer=debug")
        for node in ("b1", "b2"):
            self.procs.append(self.spawn(
                [unicron, "--config", os.path.join(self.dir, "agent.toml"), "agent",
                 "--brokers", brokers, "--node", node,
                 "--planner-key", os.path.join(run, "planner.pub"),
                 "--state-dir", os.path.join(self.dir, f"state-{node}")], node, env))

    def spawn(self, args, name, env=None):
        out = open(os.path.join(self.dir, f"{name}.out"), "w")
        err = open(os.path.join(self.dir, f"{name}.err"), "w")
        return subprocess.Popen(args, cwd=self.dir, stdout=out, stderr=err, env=env,
                                start_new_session=True)

    def text(self, name):
        try:
            return open(os.path.join(self.dir, name)).read()
        except OSError:
            return ""

    def stop(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


def iteration_ms(unicron, every, steps, step_sleep):
    command = [PYTHON, os.path.join(REPO, "examples", "torch-gpt", "train.py"),
               "--steps", str(steps), "--checkpoint-every", "0",
               "--snapshot-every", str(every), "--step-sleep", str(step_sleep)]
    cluster = Cluster(unicron, f"gpt-every-{every}", command)
    try:
        wait(f"{steps} steps", lambda: "training done" in cluster.text("b1.out")
             or "training done" in cluster.text("b2.out"), within=600)
        out = cluster.text("b1.out") + cluster.text("b2.out")
        times = [float(ms) for it, ms in ITER_MS.findall(out) if int(it) > 20]
        handover = re.findall(r"snapshot hand-over ([0-9.]+) ms per save", out)
        return statistics.mean(times), [float(h) for h in handover]
    finally:
        cluster.stop()


#: The example model at about 256 MB of state per rank: 22 M parameters,
#: their AdamW moments, all float32.
BIG_MODEL = ["--d-model", "512", "--n-heads", "8", "--n-layers", "7"]
GENERATION_2 = "generation 2 resume_from"
INTERVAL = re.compile(r"snapshots every (\d+) steps")


def planner_interval(unicron, steps):
    """The example job with BIG_MODEL: its overhead with a snapshot every
    step (the first start, before any cost is measured), then, after an
    injected exception restarts it, at the interval the planner chose from
    the measured costs, each against the same job without snapshots."""
    def train(every, fail_file=None):
        command = [PYTHON, os.path.join(REPO, "examples", "torch-gpt", "train.py"),
                   "--steps", str(steps), "--checkpoint-every", "0",
                   "--snapshot-every", str(every), *BIG_MODEL]
        if fail_file:
            command += ["--fail-file", fail_file]
        return command

    def times(text, first):
        return [float(ms) for it, ms in ITER_MS.findall(text) if int(it) >= first]

    def rank0(cluster):
        """The output of the node running rank 0 (it logs the iterations)."""
        return max((cluster.text(n) for n in ("b1.out", "b2.out")),
                   key=lambda t: len(ITER_MS.findall(t)))

    # Without snapshots: the reference.
    cluster = Cluster(unicron, "gpt-big-0", train(0))
    try:
        wait("the reference run", lambda: "training done" in rank0(cluster), within=3600)
        without = times(rank0(cluster), 6)
    finally:
        cluster.stop()
    fail = os.path.join(tempfile.gettempdir(), f"unicron-snapbench-fail-{os.getpid()}")
    cluster = Cluster(unicron, "gpt-big-1", train(1, fail))
    try:
        first = steps // 4
        wait(f"step {first}", lambda: any(int(i) >= first for i, _ in ITER_MS.findall(
            rank0(cluster))), within=3600)
        open(fail, "w").close()
        wait("the restart", lambda: GENERATION_2 in rank0(cluster), within=600)
        wait("the rest of the run", lambda: "training done" in rank0(cluster), within=3600)
        out = rank0(cluster)
        gen1, gen2 = out.split(GENERATION_2, 1)
        every = int(INTERVAL.findall(gen2)[0])
        resumed = int(re.search(r"starting at step (\d+)", gen2).group(1))
        with_every_step = times(gen1, 6)
        with_interval = times(gen2, resumed + 5)
    finally:
        cluster.stop()
        if os.path.exists(fail):
            os.remove(fail)
    base = statistics.mean(without)
    return {
        "state_mb": 256,
        "iteration_ms_without": base,
        "iteration_ms_every_step": statistics.mean(with_every_step),
        "overhead_every_step": statistics.mean(with_every_step) / base - 1,
        "planner_interval_steps": every,
        "iteration_ms_at_interval": statistics.mean(with_interval),
        "overhead_at_interval": statistics.mean(with_interval) / base - 1,
        "steps_at_interval": len(with_interval),
    }


#: Saves per payload run, and the first whose slot is a reused one.
SAVES = 8
STEADY_FROM = 5


def replica(unicron, mb):
    # Far enough apart that no save waits for the one before (at most one
    # in flight): each is measured alone.
    # Eight saves: the first ones allocate the worker's slots (pages
    # touched once); from the fifth on, slots the agent let go of are
    # reused, as in a training run. The medians are of those.
    command = [PYTHON, os.path.join(HERE, "snapshot_payload.py"), "--mb", str(mb),
               "--saves", str(SAVES), "--gap", str(3 + mb // 200)]
    cluster = Cluster(unicron, f"payload-{mb}", command, memory_limit=(6 * mb + 64) << 20)
    try:
        wait("the payloads", lambda: cluster.text("b1.out").count("payload done") +
             cluster.text("b2.out").count("payload done") >= 2, within=600)
        # The last replica goes out after the last save reached the agent.
        sent = wait("replicas", lambda: len(REPLICA.findall(
            cluster.text("b1.err") + cluster.text("b2.err"))) >= 2 * SAVES and REPLICA.findall(
            cluster.text("b1.err") + cluster.text("b2.err")), within=120)
        every_save = SAVE.findall(cluster.text("b1.out") + cluster.text("b2.out"))
        for step, _, block, agent in every_save:
            print(f"  {mb} MB save {step}: training thread {block} ms, at the agent {agent} ms",
                  flush=True)
        saves = [s for s in every_save if int(s[0]) >= STEADY_FROM]
        first = [s for s in every_save if int(s[0]) == 1]
        # Each agent's sends in order, one per save: the steady ones are
        # those of saves 5-8, when the receiver reuses its memory too.
        each = [REPLICA.findall(cluster.text(f"{node}.err")) for node in ("b1", "b2")]
        steady = [s for sends in each for s in sends[STEADY_FROM - 1:]]
        rates = [int(b) / float(s) / 1e6 for b, s in steady]
        print(f"  {mb} MB replicas, seconds: {' '.join(f'{float(s):.3f}' for _, s in sent)}",
              flush=True)
        # A worker killed: the planner restarts the job, and each worker
        # restores from its agent's memory.
        os.kill(int(PID.findall(cluster.text("b1.out"))[0]), signal.SIGKILL)
        restores = wait("the restores", lambda: len(RESTORE.findall(
            cluster.text("b1.out") + cluster.text("b2.out"))) >= 2 and RESTORE.findall(
            cluster.text("b1.out") + cluster.text("b2.out")), within=180)
        return {
            "restore_s": statistics.median(float(ms) for _, ms in restores) / 1000,
            "restore_sources": sorted({src for src, _ in restores}),
            "mb": mb,
            "replica_mb_per_s": statistics.median(rates),
            "replica_s": statistics.median(float(s) for _, s in steady),
            "first_replica_s": statistics.median(float(sends[0][1]) for sends in each),
            "save_training_thread_ms": statistics.median(float(t) for _, _, t, _ in saves),
            "save_at_agent_ms": statistics.median(float(a) for _, _, _, a in saves),
            "first_save_training_thread_ms": statistics.median(float(t) for _, _, t, _ in first),
        }
    finally:
        cluster.stop()


def cp_to_shm(mb):
    src = tempfile.NamedTemporaryFile(delete=False, dir="/var/tmp")
    src.write(b"\1" * (mb << 20))
    src.close()
    dst = f"/dev/shm/unicron-snapbench-{os.getpid()}"
    try:
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(["cp", src.name, dst], check=True)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            os.remove(dst)
        return (mb << 20) / best / 1e6
    finally:
        os.remove(src.name)


def copy_s(mb):
    """One copy of `mb` MB of float32 tensors into a preallocated buffer."""
    import torch

    n = mb * (1 << 20) // 4
    chunks = max(1, mb // 64)
    src = [torch.ones(n // chunks) for _ in range(chunks)]
    dst = [torch.empty_like(t) for t in src]
    for d in dst:
        d.fill_(0)  # pages touched, as the client's slots are
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for d, t in zip(dst, src):
            d.copy_(t)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


_RECEIVER = """
import socket, sys
size = int(sys.argv[1])
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
buf = bytearray(1 << 22)
for _ in range(3):
    conn, _ = srv.accept()
    got = 0
    while got < size:
        n = conn.recv_into(buf)
        if not n:
            break
        got += n
    conn.sendall(b"k")
    conn.close()
"""


def socket_s(mb):
    """`mb` MB through a loopback TCP socket to another process, until it
    has read them all."""
    import socket

    size = mb << 20
    payload = bytearray(size)
    rx = subprocess.Popen([PYTHON, "-c", _RECEIVER, str(size)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(rx.stdout.readline())
        best = None
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as s:
                t0 = time.perf_counter()
                s.sendall(payload)
                s.recv(1)
                dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        return best
    finally:
        rx.wait(timeout=30)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--unicron", default=os.path.join(REPO, "target", "release", "unicron"))
    p.add_argument("--steps", type=int, default=300)
    # 2000 MB needs about 28 GB here: two workers (the state and two slots
    # each) and two agents (two own snapshots and two replicas each).
    p.add_argument("--sizes", default="100,1000", help="state sizes, MB (empty: none)")
    p.add_argument("--no-example-job", action="store_true",
                   help="only the sizes (the example job's two runs take minutes)")
    p.add_argument("--step-sleep", type=float, action="append",
                   help="the example job's --step-sleep; repeatable (default: 0 and 0.08, "
                        "all compute and the demo's 0.1-s steps)")
    p.add_argument("--big-steps", type=int, default=0,
                   help="steps of the 256-MB example job run (0: not run; it takes tens "
                        "of minutes on 2 cores)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not os.path.exists(args.unicron):
        raise SystemExit(f"{args.unicron}: build it first (cargo build --release -p unicron)")
    report = {"example_job": []}
    for sleep in [] if args.no_example_job else args.step_sleep or [0.0, 0.08]:
        with_ms, handover = iteration_ms(args.unicron, 1, args.steps, sleep)
        without_ms, _ = iteration_ms(args.unicron, 0, args.steps, sleep)
        row = {
            "step_sleep_s": sleep,
            "iteration_ms_with_snapshots": with_ms,
            "iteration_ms_without": without_ms,
            "snapshot_overhead": (with_ms - without_ms) / without_ms,
            "handover_ms_per_save": statistics.mean(handover) if handover else None,
        }
        report["example_job"].append(row)
        print(f"example job, 2 ranks, --step-sleep {sleep}, steps 21-{args.steps}: {with_ms:.1f} ms "
              f"per iteration with a snapshot every step, {without_ms:.1f} ms without: overhead "
              f"{100 * row['snapshot_overhead']:+.1f}% (training thread in save: "
              f"{row['handover_ms_per_save']:.2f} ms per save)")
    if args.big_steps:
        big = planner_interval(args.unicron, args.big_steps)
        report["example_job_256mb"] = big
        print(f"example job, 256 MB a rank, 2 ranks: {big['iteration_ms_without']:.0f} ms per "
              f"iteration without snapshots; a snapshot every step "
              f"{100 * big['overhead_every_step']:+.1f}%; at the planner's interval "
              f"({big['planner_interval_steps']} steps) "
              f"{100 * big['overhead_at_interval']:+.1f}% over {big['steps_at_interval']} steps")
    report["replicas"] = []
    report["sizes"] = []
    for mb in (int(s) for s in args.sizes.split(",") if s):
        r = replica(args.unicron, mb)
        r["cp_to_dev_shm_mb_per_s"] = cp_to_shm(mb)
        report["replicas"].append(r)
        size = {
            "bytes": mb << 20,
            "save_block_s": r["save_training_thread_ms"] / 1000,
            "at_agent_s": r["save_at_agent_ms"] / 1000,
            "replica_s": r["replica_s"],
            "restore_s": r["restore_s"],
            "first_save_block_s": r["first_save_training_thread_ms"] / 1000,
            "copy_s": copy_s(mb),
            "socket_s": socket_s(mb),
        }
        report["sizes"].append(size)
        print(f"{mb} MB: save() blocks {size['save_block_s']:.3f} s "
              f"({size['save_block_s'] / size['copy_s']:.2f}x one copy, {size['copy_s']:.3f} s), "
              f"at the agent {size['at_agent_s']:.3f} s "
              f"({size['at_agent_s'] / size['copy_s']:.2f}x), restore {size['restore_s']:.3f} s "
              f"({size['restore_s'] / size['copy_s']:.2f}x, from {'/'.join(r['restore_sources'])}), "
              f"replica {size['replica_s']:.3f} s "
              f"({size['replica_s'] / size['socket_s']:.2f}x a plain socket, "
              f"{size['socket_s']:.3f} s)")
        print(f"{mb} MB state: replica to the peer {r['replica_mb_per_s']:.0f} MB/s "
              f"({r['replica_s']:.2f} s), cp to /dev/shm {r['cp_to_dev_shm_mb_per_s']:.0f} MB/s; "
              f"save(): training thread {r['save_training_thread_ms']:.0f} ms, at the agent "
              f"after {r['save_at_agent_ms']:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
