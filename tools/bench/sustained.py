#!/usr/bin/env python3
"""Sustained load through Apache Kafka (docs/BENCHMARKS.md).

The simulator at 10x the telemetry rate of a 1,024-GPU cluster (128 nodes x
8 GPUs, speed 10) for 10 minutes, through a three-broker Apache Kafka
cluster (`unicron-kafka`, the tests' cluster), with the detector, planner
and executor as separate `unicron` processes. Every 30 s it samples records
consumed, the detector's consumer lag and the detector's and planner's
resident memory; at the end it reports records/s, lag, memory at start and
end, and the dead letters (valid records in the DLQ must be zero).

usage: tools/bench/sustained.py [--minutes 10] [--unicron PATH] [--kafka PATH]
Prints a Markdown table; a benchmark, not a test.
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return float("nan")
    return float("nan")


def metrics(port):
    """Sums of each metric family over its labels, from /metrics."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    sums = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "unicron_consumer_lag_records" and 'group="unicron-detector"' not in labels:
            continue
        sums[name] = sums.get(name, 0.0) + value
    return sums


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--unicron", default=None)
    parser.add_argument("--kafka", default=None, help="the unicron-kafka binary (default: beside unicron)")
    args = parser.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    unicron = args.unicron or os.path.join(target, "release", "unicron")
    kafka = args.kafka or os.path.join(os.path.dirname(unicron), "unicron-kafka")
    for path, what in [(unicron, "--unicron"), (kafka, "--kafka")]:
        if not os.path.isfile(path):
            sys.exit(f"{what}: {path} not found")

    work = tempfile.mkdtemp(prefix="unicron-load-")
    logs = open(os.path.join(work, "services.log"), "w")
    sim_port = free_port()
    ports = {"detector": free_port(), "planner": free_port(), "executor": free_port(), "sim": free_port()}
    procs = {}
    # Runs until its stdin closes: the brokers never outlive this script.
    procs["kafka"] = subprocess.Popen([kafka, "--dir", os.path.join(work, "kafka")],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs, text=True)
    line = procs["kafka"].stdout.readline()
    if not line.startswith("brokers: "):
        sys.exit(f"unicron-kafka did not start; see {work}/services.log")
    brokers = line.split()[1]
    key = os.path.join(work, "planner.key")
    out = subprocess.run([unicron, "keys", "generate", "--out", key], capture_output=True, text=True, check=True)
    public = out.stdout.strip().removeprefix("public key: ")
    config = os.path.join(work, "unicron.toml")
    with open(config, "w") as f:
        f.write(f"""[kafka]
brokers = "{brokers}"
[status]
enabled = false
[planner]
key_id = "load"
signing_key_file = "{key}"
state_dir = "{work}/planner"
[executor]
cluster = "sim"
state_dir = "{work}/executor"
[executor.public_keys]
load = "{public}"
[executor.backend]
kind = "simulator"
url = "http://127.0.0.1:{sim_port}/actions"
[sim]
nodes = 128
jobs = 8
speed = 10.0
listen = "127.0.0.1:{sim_port}"
""")
    base = [unicron, "--config", config]
    subprocess.run(base + ["topics", "create"], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, RUST_LOG="warn")

    def start(name, sub):
        e = dict(env, UNICRON_METRICS__LISTEN=f"127.0.0.1:{ports[name]}")
        procs[name] = subprocess.Popen(base + sub, stdout=logs, stderr=logs, env=e)

    start("detector", ["detector"])
    start("planner", ["planner"])
    start("executor", ["executor"])
    seconds = int(args.minutes * 60)
    start("sim", ["sim", "--duration", f"{seconds}s", "--summary-json", os.path.join(work, "summary.json")])

    samples = []
    began = time.time()
    try:
        while procs["sim"].poll() is None:
            time.sleep(30 if samples else 15)
            d, p = metrics(ports["detector"]), metrics(ports["planner"])
            samples.append({
                "t": time.time() - began,
                "records_in": d.get("unicron_records_in_total", 0.0),
                "lag": d.get("unicron_consumer_lag_records", 0.0),
                "detector_mib": rss_mib(procs["detector"].pid),
                "planner_mib": rss_mib(procs["planner"].pid),
                "dlq": d.get("unicron_dlq_records_total", 0.0) + p.get("unicron_dlq_records_total", 0.0),
                "failures": d.get("unicron_detector_failures_total", 0.0),
            })
            s = samples[-1]
            print(f"t={s['t']:5.0f}s records_in={s['records_in']:.0f} lag={s['lag']:.0f} "
                  f"detector={s['detector_mib']:.1f}MiB planner={s['planner_mib']:.1f}MiB dlq={s['dlq']:.0f}",
                  file=sys.stderr, flush=True)
    finally:
        procs["kafka"].stdin.close()
        for name in ["sim", "executor", "planner", "detector", "kafka"]:
            if procs[name].poll() is None:
                procs[name].terminate()
                try:
                    procs[name].wait(timeout=20)
                except subprocess.TimeoutExpired:
                    procs[name].kill()

    if len(samples) < 3:
        sys.exit("too few samples")
    first, last = samples[0], samples[-1]
    rate = (last["records_in"] - first["records_in"]) / (last["t"] - first["t"])
    lags = [s["lag"] for s in samples]
    print("| measure | value |")
    print("|---|---|")
    print(f"| duration | {last['t']:.0f} s real, 10x telemetry rate of 128 nodes x 8 GPUs |")
    print(f"| records consumed by the detector | {last['records_in']:.0f} ({rate:.0f} records/s) |")
    print(f"| detector consumer lag, records | mean {sum(lags) / len(lags):.0f}, max {max(lags):.0f}, last {lags[-1]:.0f} |")
    print(f"| detector resident memory | {first['detector_mib']:.1f} MiB at {first['t']:.0f} s, {last['detector_mib']:.1f} MiB at the end |")
    print(f"| planner resident memory | {first['planner_mib']:.1f} MiB at {first['t']:.0f} s, {last['planner_mib']:.1f} MiB at the end |")
    print(f"| failures detected | {last['failures']:.0f} |")
    print(f"| records dead-lettered | {last['dlq']:.0f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
