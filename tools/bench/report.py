#!/usr/bin/env python3
"""Builds docs/BENCHMARKS.md from the outputs tools/bench/run.sh collected.

Every figure in the document comes from those outputs; the text here only
says what each benchmark measures. Usage: report.py WORK_DIR > BENCHMARKS.md;
`report.py --pipeline-only DIR` prints the whole-pipeline section alone from
the pipeline-*.json files in DIR.
"""

import datetime
import json
import os
import platform
import subprocess
import sys


def read(work, name):
    path = os.path.join(work, name + ".out")
    with open(path, encoding="utf-8") as f:
        return f.read()


def tables(text):
    """The Markdown table lines of a benchmark's output, as one block."""
    return "\n".join(l for l in text.splitlines() if l.startswith("|") or not l.strip() or l[0].isalpha()).strip()


def cell(text, row_start, column):
    """A number from the table row whose first cell starts with row_start."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(row_start):
            value = cells[column].replace(",", "").replace("%", "").split()[0]
            return float(value)
    raise SystemExit(f"report: no row starting with {row_start!r}")


def command(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    model = "unknown CPU"
    memory = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    memory = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} × {model}, {memory} RAM, {platform.system()} {platform.release()}"


SECTIONS = [
    ("transport", "Transport: raw rdkafka through the embedded broker",
     "The reference: 1 KB records produced and consumed with plain rdkafka, no decoding and no unicron code, over 12 partitions like the telemetry topic.",
     "cargo bench -p unicron-tests --bench transport"),
    ("detector", "Detector: telemetry through the service, and detection latency",
     "48 nodes × 150 dcgm-exporter-like batches of 64 samples through the detector service on the embedded broker, against the same records read raw and decoded in-process; then single round trips from a failing log line produced to its failure event consumed.",
     "cargo bench -p unicron-tests --bench detector_pipeline"),
    ("heartbeats", "Detector: heartbeats from a backlog, against a plain consumer",
     "Heartbeats are most of the detector's input (one per node a second). 6,400 nodes × 40 s of them produced first, then read by a plain rdkafka consumer and by the detector service started on the backlog (timed from a tenth of them read to the last, so the group join and the start-up warm-up read are left out), on the same broker; and the detector's core alone on the same records in rounds of the service's size. `-- --kafka` runs it on a three-broker Apache Kafka cluster on the same machine.",
     "cargo bench -p unicron-tests --bench detector_heartbeats"),
    ("classify", "Detector: log classification, one core",
     "The built-in rules over a million generated lines: one Aho-Corasick pass per line, the regex set only on a keyword hit.",
     "cargo bench -p unicron-tests --bench classify_lines"),
    ("new_topic", "Pipelines: a topic created after the detector started",
     "With `[detector] new_topic_check_s = 1` (the default): three topics created one after another while the detector runs, each with one log record carrying a failure: time from that record to the failure on `unicron.failures`. The embedded broker (librdkafka's mock cluster) holds every consumer-group rebalance for the session timeout less a second, which is why `unicron up` creates the detector's input topics on it before the detector starts; on Kafka a rebalance ends as soon as every member rejoined.",
     "cargo bench -p unicron-tests --bench new_topic"),
    ("pipelines", "Pipelines: rsyslog and Prometheus in front of the detector",
     "Debian's rsyslogd on `deploy/rsyslog/60-unicron.conf` (omkafka on Debian's librdkafka 2.0.2): a line appended to a watched training log → its failure, on the embedded broker and on Apache Kafka 4.1.1. Debian's Prometheus scraping a dcgm-exporter page every second and remote-writing to `unicron remote-write`: the page changed → each failure.",
     "cargo test --release -p unicron-detector --test rsyslog -- --nocapture; cargo test --release -p unicron --test prometheus_remote_write -- --nocapture"),
    ("plan", "Planner: plan time of the dynamic programme",
     "Seeded allocation problems with Megatron-like profiles at three cluster sizes.",
     "cargo bench -p unicron-tests --bench plan_time"),
    ("failure_to_command", "Planner: failure → command on the embedded broker",
     "Single round trips: a failure event produced, the planner decides, commits state, offsets and outbox to RocksDB, publishes, and the signed command is consumed.",
     "cargo bench -p unicron-planner --bench failure_to_command"),
    ("offline", "The whole loop offline",
     "The simulator driving the core detector, planner and executor gate in one thread, no broker: simulated seconds per real second.",
     "cargo bench -p unicron-tests --bench offline_loop"),
    ("evaluation", "The evaluation at 10,240 GPUs and on the real trace",
     "`unicron evaluate --seeds 1` as a benchmark: `gpus-10240`, a week of 1,280 nodes and 64 jobs; `real-infinitehbd`, StepFun's whole fault trace (349 days) on its 400 servers; `real-infinitehbd-10240`, the trace tiled over 1,280 nodes. One failure trace fed to every policy, the runs spread over the cores (docs/EVALUATION.md).",
     "cargo bench -p unicron-tests --bench evaluation"),
    ("replay", "Replay from the Avro archive, one core",
     "12 simulated hours of a 128-GPU cluster archived as the archiver writes it, then read back, every decision re-derived exactly and every failure re-derived in event-time order.",
     "cargo bench -p unicron-tests --bench replay_archive"),
]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--pipeline-only":
        # One section, from pipeline-*.json files of runs made by hand.
        pipeline(sys.argv[2])
        return
    work = sys.argv[1]
    outs = {name: read(work, name) for name, *_ in SECTIONS}
    with open(os.path.join(work, "up.json"), encoding="utf-8") as f:
        up = json.load(f)

    transport = cell(outs["transport"], "produce → consume", 3)
    stages = [
        ("detector service on the embedded broker (telemetry batches)", cell(outs["detector"], "detector service", 2)),
        ("detector core in-process: decode + classify (telemetry batches)", cell(outs["detector"], "detector core", 2)),
        ("detector service on the embedded broker (heartbeats, from a backlog)", cell(outs["heartbeats"], "detector service", 3)),
        ("log classification, one core (lines)", cell(outs["classify"], "99% benign", 4)),
        ("offline loop, 128 GPUs (records)", cell(outs["offline"], "128", 6)),
        ("archive read (records)", cell(outs["replay"], "read the archive", 3)),
        ("whole replay from the archive (records)", cell(outs["replay"], "whole replay", 3)),
    ]

    print("# Benchmarks")
    print()
    print("Written by `tools/bench/run.sh` from the benchmarks' own output; run it again")
    print("to refresh every figure. Release builds.")
    print()
    print(f"- machine: {machine()}")
    print(f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"- commit: {command(['git', 'rev-parse', '--short', 'HEAD'])}; {command(['rustc', '-V'])}")
    print()
    print("## Every stage against the transport")
    print()
    print(f"Reference: raw rdkafka produce → consume on the embedded broker, **{transport:,.0f} records/s**.")
    print()
    print("| stage | per second | of the transport's records/s |")
    print("|---|---:|---:|")
    print(f"| transport: produce → consume (reference) | {transport:,.0f} | 1.00 |")
    for name, rate in stages:
        print(f"| {name} | {rate:,.0f} | {rate / transport:.2f} |")
    print()
    print("A telemetry batch carries 64 samples and a log record one line, so a stage")
    print("above 1.00 handles its records faster than the transport moves them.")
    print()
    print("## The whole loop: `unicron up`")
    print()
    print("`unicron up --trace tools/traces/example.csv --duration 60s` (one failure of")
    print("each kind of the example trace), simulated event time:")
    print()
    print("| failures injected | detected | mean detection delay | max | failure → action | commands | late | false detections | WAF of ideal |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {up['failures_injected']} | {up['failures_detected']} | {up['mean_detection_delay_s']:.1f} s | {up['max_detection_delay_s']:.1f} s "
          f"| {up['mean_time_to_action_s']:.1f} s | {up['commands_executed']} | {up['late_actions']} | {up['false_detections']} | {up['waf_fraction'] * 100:.1f}% |")
    for name, title, what, cmd in SECTIONS:
        print()
        print(f"## {title}")
        print()
        print(what + f" `{cmd}`")
        print()
        print(tables(outs[name]))
    print()
    agent(work)
    slurm(work)
    kubernetes(work)
    clusters(work)
    pipeline(work)
    sustained = os.path.join(work, "sustained.md")
    if os.path.exists(sustained):
        print(SUSTAINED_TITLE)
        print()
        print(SUSTAINED_WHAT)
        print()
        with open(sustained, encoding="utf-8") as f:
            print(f.read().rstrip())
        print()


def agent(work):
    """The node agent on real PyTorch, against torchrun, and its own cost."""
    torch = os.path.join(work, "torch.json")
    if os.path.exists(torch):
        with open(torch, encoding="utf-8") as f:
            report = json.load(f)
        print("## Real PyTorch: `unicron agent` against torchrun's elastic agent")
        print()
        print("`tools/torch-demo/run.sh --json`: the example GPT (examples/torch-gpt, DDP on CPU,")
        print("gloo, one worker per node, one step ≈ 0.1 s with `--step-sleep 0.08`, disk checkpoint")
        print("every 20 steps, an in-memory snapshot every step). unicron: four agents as four nodes")
        print("of two jobs, replicas on (each node's snapshots on the job's other node), with")
        print("detector and planner of `unicron up --no-sim`; delays from the injection to the")
        print("failure's detection and to the job's first step after recovery; `restore` is the")
        print("agents' own measure, from the start command's event time (the detection) to the")
        print("slowest rank's first step. The node loss happens with the job's checkpoint directory")
        print("deleted. torchrun: the same job on one node with two workers, `--max-restarts 3")
        print("--monitor-interval 1` (1.13's default interval is 5 s), same faults on rank 1, its")
        print("best case: disk checkpoints every 20 steps.")
        print()
        print("| fault | unicron detected | action | detect | first step after | restore | restored from (by rank) | steps redone | torchrun: first step after | steps redone | torchrun says |")
        print("|---|---|---|---:|---:|---:|---|---:|---:|---:|---|")
        theirs = {t["injected"]: t for t in report["torchrun"]["faults"]}
        for f in report["faults"]:
            t = theirs.get(f["injected"])
            if t is None:
                tr = ("n/a (one node)" if "node" in f["injected"] else "not injected", "", "")
            elif t["recovered"]:
                tr = (f"{t['recover_s']:.1f} s", str(t["steps_redone"]), t["torchrun_says"])
            else:
                tr = ("never", "—", t["torchrun_says"])
            print(f"| {f['injected']} | {f['detected']} | {f['action']} | {f['detect_s']:.2f} s | {f['recover_s']:.2f} s "
                  f"| {f.get('restore_s', 0):.2f} s | {' '.join(f.get('restored_from', []))} "
                  f"| {f['steps_redone']} | {tr[0]} | {tr[1]} | {tr[2][:90]} |")
        for t in report["torchrun"]["faults"]:
            if "max-restarts 0" in t["injected"]:
                print()
                print(f"torchrun with `--max-restarts 0`, rank 1 killed: its summary says {t['torchrun_says']}.")
        print()
        if "snapshot_overhead" in report:
            print(f"Snapshot every step: the training thread spent {100 * report['snapshot_overhead']:.2f}% "
                  f"of the mean iteration in `save()` (the copy; serialisation and transfer run beside the next step).")
            print()
        print(f"Both jobs reached step {report['steps_completed']} of {report['target_steps']}; final loss "
              f"{report['final_loss']:.9f} against {report['reference_loss']:.9f} uninterrupted (heavier job, "
              f"world size unchanged), {report['final_loss_small']:.9f} against "
              f"{report['reference_loss_small']:.9f} (lighter job, shrunk from two nodes to one).")
        print()
    snapshots = os.path.join(work, "snapshots.json")
    if os.path.exists(snapshots):
        with open(snapshots, encoding="utf-8") as f:
            snap = json.load(f)
        print("## In-memory snapshots: what they cost")
        print()
        print("`tools/torch-demo/snapshot_bench.py`: `unicron up --no-sim` and two agents with")
        print("replicas on, on this 2-core machine (the ranks, the agents, the broker and the")
        print("planner share both cores). The example job on two ranks, same seed, with a snapshot")
        print("every step and without (mean iteration after step 20), all compute (`--step-sleep 0`)")
        print("and with the demo's 0.1-s steps; then a worker handing its agent a state of 100 MB")
        print("and 1 GB three times, each sent on to the peer agent over TCP on loopback.")
        print()
        print("| example job | ms per iteration, snapshot every step | without | overhead | training thread in `save()` |")
        print("|---|---:|---:|---:|---:|")
        for row in snap["example_job"]:
            print(f"| `--step-sleep {row['step_sleep_s']}` | {row['iteration_ms_with_snapshots']:.1f} "
                  f"| {row['iteration_ms_without']:.1f} | {100 * row['snapshot_overhead']:+.1f}% "
                  f"| {row['handover_ms_per_save'] or 0:.2f} ms |")
        print()
        print("| state | replica to the peer | MB/s | `cp` to /dev/shm, MB/s | `save()` on the training thread | at the agent after |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in snap["replicas"]:
            print(f"| {r['mb']} MB | {r['replica_s']:.2f} s | {r['replica_mb_per_s']:.0f} | "
                  f"{r['cp_to_dev_shm_mb_per_s']:.0f} | {r['save_training_thread_ms']:.0f} ms | {r['save_at_agent_ms']:.0f} ms |")
        print()
    cost = os.path.join(work, "agent.out")
    if os.path.exists(cost):
        print("## What an agent costs")
        print()
        print("`tools/bench/agent.py`: one agent whose job prints 100 lines/s, for 30 s after")
        print("a 10-s warm-up, on the machine that also runs the broker and the services; each")
        print("line's time from the worker's print to its arrival from `unicron.logs` (kcat).")
        print()
        with open(cost, encoding="utf-8") as f:
            print(f.read().rstrip())
        print()


def kubernetes(work):
    """unicron on a real Kubernetes control plane, against Kubernetes alone."""
    path = os.path.join(work, "kubernetes.json")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        r = json.load(f)
    cp = r["control_plane"]
    print("## Kubernetes: isolating through the API server, and Kubernetes alone")
    print()
    print(f"`tools/kubernetes/run.sh --json`: Kubernetes {cp['kubernetes']} (etcd, kube-apiserver,")
    print("kube-controller-manager, kube-scheduler) built from the Go module proxy, kwok with")
    print(f"{cp['nodes']} GPU nodes (`node-monitor-grace-period={cp['node_monitor_grace_s']}s`), ready in {cp['ready_s']:.1f} s;")
    print("two Jobs planned from their annotations; `unicron up --no-sim` with the executor's")
    print("Kubernetes backend and `kube-watch`. Times from the fault; \"alone\" is what")
    print("Kubernetes does by itself.")
    print()
    print("| fault | detected | action | detect | API write | pod off the node | Kubernetes alone |")
    print("|---|---|---|---:|---:|---:|---|")
    for f in r["faults"]:
        def s(key):
            v = f.get(key)
            return "—" if v is None else f"{v:.2f} s"
        alone = f.get("kubernetes_alone_s")
        alone = f"{alone:.0f} s ({f['kubernetes_alone']})" if alone is not None else f["kubernetes_alone"]
        print(f"| {f['fault']} | {f['detected']} | {f['action']} | {s('detect_s')} | {s('acted_s')} | {s('evicted_s')} | {alone} |")
    print()
    rp = r["replay"]
    print(f"Replay of the run's archive: {rp['decisions']} decisions, {rp['diverged']} diverged.")
    print()


def slurm(work):
    """unicron on a real Slurm, against Slurm's own requeue path."""
    path = os.path.join(work, "slurm.json")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        r = json.load(f)
    q = r["requeue"]
    print("## Slurm: draining, shrinking, and Slurm's own requeue")
    print()
    print("`tools/slurm-demo/run.sh --json`: Debian's Slurm 22.05, a controller and three")
    print("`slurmd -N nX` on this machine (`SlurmdTimeout=10`), the example GPT as one")
    print("`sbatch --no-kill` job of three nodes under `unicron agent` (one per node, a job")
    print("step each), with `unicron up --no-sim` running detector, planner, the executor's")
    print("Slurm backend and `slurm-watch` (polling every 1 s). Times from the fault.")
    print()
    print("| what | time |")
    print("|---|---:|")
    print(f"| Xid 48 line in n2's kernel log → n2 DRAIN in Slurm (`unicron:` reason) | {r['ecc_to_drain_s']:.2f} s |")
    print(f"| Xid 48 line → first training step on n1 and n3 (allocation shrunk) | {r['ecc_to_training_s']:.2f} s |")
    print(f"| n3's slurmd and agent killed → node loss detected (heartbeats) | {r['node_loss_detect_s']:.2f} s |")
    print(f"| n3 killed → first training step on n1 | {r['node_loss_to_training_s']:.2f} s |")
    print(f"| n3 killed → Slurm's NOT_RESPONDING/DOWN as a cluster event (no second action) | {r['slurm_verdict_s']:.2f} s |")
    print(f"| Slurm's own path, no unicron: `scontrol requeue` → first step of the requeued run (credential lifetime {q['cred_expire_s']} s) | {q['requeue_to_training_s']:.2f} s |")
    print()
    print(f"The requeued job resumed at iteration {q['resumed_at_iteration']} from its checkpoint; most of its")
    print("delay is `BeginTime`: Slurm holds a requeued job for the credential lifetime")
    print("(`AuthInfo=cred_expire`, 120 s by default). Under unicron the job never leaves")
    print("its allocation: the agents restart the workers on the nodes it keeps.")
    print()


def clusters(work):
    """Many clusters on one planner: tools/bench/clusters.sh --json."""
    runs = []
    for name in sorted(os.listdir(work)):
        if name.startswith("clusters-") and name.endswith(".json"):
            with open(os.path.join(work, name), encoding="utf-8") as f:
                runs.append(json.load(f))
    if not runs:
        return
    runs.sort(key=lambda r: r["clusters"])
    print("## Many clusters on one planner")
    print()
    print("`tools/bench/clusters.sh`: N clusters of 1,024 GPUs (128 nodes, 16 jobs each) on one")
    print("planner service and the embedded broker; failures fed straight to it (the planner")
    print("alone), half SEV3 (a reattempt) and half SEV1 (an isolation and a re-plan of the")
    print("whole cluster), at 10x the paper rate in event time 10x faster than real time.")
    print("Latency: failure produced → first command naming it consumed. RSS is the bench")
    print("process (planner and embedded broker); restart: planner stopped and started on")
    print("its RocksDB state → its first decision.")
    print()
    print("| clusters | GPUs | failures | per s | decided | p50 | p99 | RSS at start → end | state | max lag | restart |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['clusters']} | {r['clusters'] * r['gpus_per_cluster']:,} | {r['failures']} | {r['inputs_per_s']:.1f} "
              f"| {r['decisions']} | {r['decision_p50_ms']:.1f} ms | {r['decision_p99_ms']:.1f} ms "
              f"| {r['rss_mb_at_start_of_failures']:.0f} → {r['planner_rss_mb']:.0f} MB | {r['state_mb']:.1f} MB "
              f"| {r['max_lag_records']} | {r['restart_s'] or 0:.1f} s |")
    print()


def pipeline(work):
    """The whole pipeline: tools/bench/clusters.sh --pipeline --json, files pipeline-*.json."""
    runs = []
    for name in sorted(os.listdir(work)):
        if name.startswith("pipeline-") and name.endswith(".json"):
            with open(os.path.join(work, name), encoding="utf-8") as f:
                runs.append(json.load(f))
    if not runs:
        return
    runs.sort(key=lambda r: (r["clusters"], -r["minutes"]))
    ms = lambda h, q: f"{h[q + '_ms'] / 1000:.2f} s" if h[q + "_ms"] >= 1000 else f"{h[q + '_ms']:.0f} ms"
    mb = lambda v: "n/a" if v is None else f"{v:.0f}"
    slope = lambda v: "n/a" if v is None else f"{v:+.1f} MB/h"
    print("## The whole pipeline: many clusters through detector and planner")
    print()
    print("`tools/bench/clusters.sh --pipeline`: N clusters of 1,024 GPUs (128 nodes, 16 jobs each)")
    print("through one detector and one planner service (one process, two worker threads). Every")
    print("node heartbeats once a second, the agent's rate (the detector calls a node lost 3 s")
    print("after its last heartbeat); failures from the simulator's taxonomy mix (hangs left out)")
    print("arrive as the evidence the simulator emits for them: log lines, a process exit, a node")
    print("going silent. The bench plays executor and cluster: every command succeeds at once and")
    print("an isolated node is repaired 30 s later. Event time is real time; failures come at")
    print("100x the paper rate, the same failures per real second as the planner-alone bench.")
    print("Latencies are wall time as the bench reads the topics: evidence produced → failure")
    print("record → first command naming it. Symptoms (NCCL timeouts, network errors, exits) are")
    print("held for the detector's 2-s correlation window plus its 1-s lateness, and a lost node")
    print("is called after the 3-s deadline, so their evidence → failure is about 3 s by design;")
    print("root causes (ECC, Xid, CUDA errors) go through in milliseconds. RSS is the bench")
    print("process (detector, planner and the bench's producers); its slope is a least-squares")
    print("fit after the warm-up over points that each span at least 1,000 decisions.")
    print()
    print("| clusters | GPUs | broker | min | failures (per s) | detector inputs/s | answered "
          "| evidence → failure p50 / p99 | failure → command p50 / p99 | evidence → command p50 / p99 "
          "| max lag det. / planner | RSS after warm-up → end | RSS slope | state end (slope) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        e2f, f2c, e2c = r["evidence_to_failure"], r["failure_to_command"], r["evidence_to_command"]
        lag = r["max_lag_records"]
        print(f"| {r['clusters']} | {r['clusters'] * r['gpus_per_cluster']:,} | {r['brokers']} | {r['minutes']:g} "
              f"| {r['failures']} ({r['failures_per_s']:.1f}) | {r['inputs_per_s']:,.0f} | {r['commanded']} "
              f"| {ms(e2f, 'p50')} / {ms(e2f, 'p99')} | {ms(f2c, 'p50')} / {ms(f2c, 'p99')} "
              f"| {ms(e2c, 'p50')} / {ms(e2c, 'p99')} | {lag.get('detector', 0):.0f} / {lag.get('planner', 0):.0f} "
              f"| {mb(r['rss_mb_after_warmup'])} → {mb(r['planner_rss_mb'])} MB | {slope(r['rss_slope_mb_per_h'])} "
              f"| {r['state_mb']:.0f} MB ({slope(r['state_slope_mb_per_h'])}) |")
    print()
    print("Records produced and consumed at each stage (the run fails on any shortfall):")
    print()
    print("| clusters | min | heartbeats + evidence → detector | failures → planner | commands → bench "
          "| results → planner | decisions | planner decision mean | heartbeat ack p99 | broker RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        st = r["stages"]
        broker = "" if r.get("broker_rss_mb") is None else f"{r['broker_rss_mb']:.0f} MB"
        print(f"| {r['clusters']} | {r['minutes']:g} "
              f"| {st['heartbeats_produced'] + st['evidence_produced']:,} → {st['detector_consumed']:,} "
              f"| {st['failures_published']:,} → {st['failures_consumed_by_planner']:,} "
              f"| {st['commands_published']:,} → {st['commands_consumed']:,} "
              f"| {st['results_produced']:,} → {st['results_consumed_by_planner']:,} "
              f"| {r['decisions']:,} | {r['planner_decision_mean_ms']:.2f} ms | {r['heartbeat_ack']['p99_ms']:.0f} ms | {broker} |")
    print()


SUSTAINED_TITLE = "## Sustained load through Apache Kafka"
SUSTAINED_WHAT = (
    "`tools/bench/sustained.py`: the simulator at 10x the telemetry rate of a "
    "1,024-GPU cluster (128 nodes x 8 GPUs, speed 10) for 10 minutes through a three-broker Apache Kafka cluster "
    "(4.1.1, KRaft, replication 3), with detector, planner and executor as separate "
    "processes; sampled every 30 s from their /metrics and /proc."
)


if __name__ == "__main__":
    main()
