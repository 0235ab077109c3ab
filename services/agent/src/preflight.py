"""unicron's pre-flight check of one node, run by `unicron agent`.

Prints one JSON line: the figures the planner judges (matmul GFLOP/s, host
memory GB/s, pairwise all-reduce GB/s) and, per part, why it failed or was
not run. A part that cannot run is a failure with its reason, never a pass.
With --peer-only, the node only serves the all-reduce of the node checked.
"""

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time

out = {"failures": [], "skipped": []}


def part(name, run):
    try:
        run()
    except Exception as error:  # noqa: BLE001 - every failure is reported
        out["failures"].append(f"{name}: could not run: {type(error).__name__}: {error}")


def timed(work, seconds):
    """Runs `work` until `seconds` have passed; returns (runs, elapsed)."""
    work()  # warm-up
    runs, start = 0, time.perf_counter()
    while True:
        work()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return runs, elapsed


def gpu():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        out["skipped"].append("gpu: nvidia-smi not found (no NVIDIA driver here)")
        return
    query = [smi, "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader"]
    done = subprocess.run(query, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        out["failures"].append(f"gpu: nvidia-smi exited {done.returncode}: {done.stderr.strip()[-200:]}")
        return
    for line in done.stdout.splitlines():
        index, _, ecc = (field.strip() for field in line.partition(","))
        if ecc.isdigit() and int(ecc) > 0:
            out["failures"].append(f"gpu {index}: {ecc} uncorrected ECC errors")
    dcgmi = shutil.which("dcgmi")
    if dcgmi is None:
        out["skipped"].append("gpu: dcgmi not found, no DCGM diagnostic")
        return
    diag = subprocess.run([dcgmi, "diag", "-r", "1"], capture_output=True, text=True, timeout=120)
    if diag.returncode != 0:
        out["failures"].append(f"gpu: dcgmi diag -r 1 exited {diag.returncode}")


def matmul(torch, seconds):
    n = 512
    a, b = torch.rand(n, n), torch.rand(n, n)
    runs, elapsed = timed(lambda: torch.mm(a, b), seconds)
    out["matmul_gflops"] = 2 * n**3 * runs / elapsed / 1e9


def memory(torch, seconds):
    size = 64 << 20
    src, dst = torch.empty(size, dtype=torch.uint8), torch.empty(size, dtype=torch.uint8)
    src.fill_(1)
    runs, elapsed = timed(lambda: dst.copy_(src), seconds)
    out["memory_gbps"] = size * runs / elapsed / 1e9


def allreduce(torch, args):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.pair_rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=args.peer_timeout),
    )
    try:
        tensor = torch.ones(4 << 20)  # 16 MiB of float32
        runs, elapsed = timed(lambda: dist.all_reduce(tensor), args.seconds)
        # Bus bandwidth of a ring all-reduce: 2(n-1)/n of the data per rank.
        out["allreduce_gbps"] = tensor.numel() * 4 * runs / elapsed / 1e9
    finally:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--pair-rank", type=int, default=0)
    parser.add_argument("--master-addr")
    parser.add_argument("--master-port", type=int)
    parser.add_argument("--peer-timeout", type=float, default=30.0)
    parser.add_argument("--peer-only", action="store_true")
    args = parser.parse_args()
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        out["failures"].append(f"torch: could not import: {error}")
        torch = None
    if not args.peer_only:
        part("gpu", gpu)
        if torch is not None:
            part("matmul", lambda: matmul(torch, args.seconds))
            part("memory", lambda: memory(torch, args.seconds))
    if args.master_addr is None:
        out["skipped"].append("all-reduce: no idle checked peer")
    elif torch is not None:
        part("all-reduce", lambda: allreduce(torch, args))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
