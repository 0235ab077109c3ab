#!/usr/bin/python3
"""What `unicron agent` costs, and how fast a worker's line reaches Kafka.

`unicron up --no-sim` (embedded broker, detector, planner) and one agent
whose job prints --rate lines per second, each with the wall time it was
printed. After a warm-up, for --seconds: the agent's CPU (utime + stime from
/proc, as a share of one core) and resident memory, and for every line read
back from `unicron.logs` by kcat the time from print to arrival. The agent
and the worker share the machine with the broker and services, as they
would share a node with the training job.

usage: tools/bench/agent.py [--unicron PATH] [--rate 100] [--seconds 30]
Prints a Markdown table; a benchmark, not a test.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

TICKS = os.sysconf("SC_CLK_TCK")
PRINTED = re.compile(rb"printed=(\d+\.\d+)")

WORKER = r"""
import sys, time
rate = float(sys.argv[1])
i = 0
start = time.time()
while True:
    i += 1
    print(f"bench line {i} printed={time.time() * 1000:.3f} " + "x" * 60, flush=True)
    time.sleep(max(0.0, start + i / rate - time.time()))
"""


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wait_file(path, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().endswith("\n"):
            return open(path).read().strip()
        time.sleep(0.2)
    raise SystemExit(f"agent bench: {path} never appeared")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--unicron", default="target/release/unicron")
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=10.0)
    args = p.parse_args()
    args.unicron = os.path.abspath(args.unicron)  # the services run in a scratch directory
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if not kcat:
        raise SystemExit("agent bench: kcat is needed (./dev installs it)")
    work = tempfile.mkdtemp()
    procs = []
    try:
        run = os.path.join(work, "run")
        env = dict(os.environ, UNICRON_METRICS__ENABLED="false")
        procs.append(subprocess.Popen(
            [args.unicron, "up", "--no-sim", "--no-status", "--archive", run],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work))
        brokers = wait_file(os.path.join(run, "brokers"))
        worker = os.path.join(work, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        agent = subprocess.Popen(
            [args.unicron, "agent", "--brokers", brokers, "--planner-key", os.path.join(run, "planner.pub"),
             "--cluster", "bench", "--node", "b1", "--state-dir", os.path.join(work, "state"),
             "--job", "lines", "--", sys.executable, worker, str(args.rate)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
        procs.append(agent)
        arrivals = []
        # A short fetch wait, or kcat's own polling (500 ms) is what is measured.
        reader = subprocess.Popen([kcat, "-C", "-b", brokers, "-t", "unicron.logs", "-o", "end", "-u", "-q",
                                   "-X", "fetch.wait.max.ms=5",
                                   "-f", "%s\n"], stdout=subprocess.PIPE)
        procs.append(reader)
        measuring = threading.Event()

        def read():
            for raw in reader.stdout:
                arrived = time.time() * 1000
                m = PRINTED.search(raw)
                if m and measuring.is_set():
                    arrivals.append(arrived - float(m.group(1)))

        threading.Thread(target=read, daemon=True).start()
        time.sleep(args.warmup)
        measuring.set()
        cpu0, t0 = cpu_seconds(agent.pid), time.time()
        rss = []
        while time.time() < t0 + args.seconds:
            time.sleep(1)
            rss.append(rss_mb(agent.pid))
        cpu = (cpu_seconds(agent.pid) - cpu0) / (time.time() - t0)
        measuring.clear()
        if not arrivals:
            raise SystemExit("agent bench: no line arrived (is the job running?)")
        print("| lines/s | lines read back | agent CPU (share of one core) | agent RSS max | line → Kafka p50 | p99 | max |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {args.rate:.0f} | {len(arrivals)} | {cpu * 100:.2f}% | {max(rss):.1f} MB "
              f"| {percentile(arrivals, 50):.1f} ms | {percentile(arrivals, 99):.1f} ms | {max(arrivals):.1f} ms |")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
