#!/usr/bin/python3
"""A small GPT trained with PyTorch DistributedDataParallel on CPU (gloo).

An example job for unicron: real torch.distributed, real checkpoints, real
resume, Megatron-LM style progress lines, and failure injection.  See README.md
in this directory for how to run it and what a supervising agent can rely on.

Launch with torchrun (or ./torchrun.py, the shim for Debian's torch 1.13 on
Python 3.11), or by hand with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set.  Without WORLD_SIZE it runs as one process.
"""

import torch

# First thing: one intra-op and one inter-op thread.  The machines this runs on
# have few cores, and a supervising agent's heartbeats must not be starved.
torch.set_num_threads(1)
torch.set_num_interop_threads(1)

import argparse  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# unicron's client (clients/python in the repository): in-memory snapshots
# held by the node's agent.  Optional: without it the job checkpoints only.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "clients", "python"))
try:
    import unicron_client  # noqa: E402
except ImportError:
    unicron_client = None


def seconds_since_process_start():
    """From the kernel's start time of this process (so the interpreter and
    the torch import count), at the 10 ms resolution of /proc."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return float("nan")


# The exception the failure injection raises; its text is what a CUDA
# illegal-address fault looks like in a real job's log.
INJECTED_FAILURE = "CUDA error: an illegal memory access was encountered"


def log(line):
    """One line, written with a single write(): under `python -u` (which
    torchrun uses) print() writes the text and the newline separately, and
    the lines of ranks sharing one stdout would interleave mid-line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="training iterations")
    p.add_argument("--checkpoint-every", type=int, default=20,
                   help="save a checkpoint every K iterations (0: never)")
    p.add_argument("--checkpoint-dir",
                   default=os.environ.get("UNICRON_CHECKPOINT_DIR") or "./checkpoints",
                   help="default: $UNICRON_CHECKPOINT_DIR, else ./checkpoints")
    p.add_argument("--seed", type=int, default=1234,
                   help="seeds the weights and the synthetic corpus")
    p.add_argument("--global-batch", type=int, default=8,
                   help="sequences per iteration over all ranks")
    p.add_argument("--micro-batch", type=int, default=2,
                   help="sequences per forward/backward; fixed whatever the world size")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--warmup", type=int, default=10, help="linear warm-up iterations")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=1,
                   help="print a progress line every N iterations")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds added to every iteration (counted in its time)")
    p.add_argument("--checkpoint-sleep", type=float, default=0.0,
                   help="seconds added to every checkpoint save (not counted in "
                        "the iteration time), to make saves visibly slow in tests")
    p.add_argument("--compute-timing", action="store_true",
                   help="compute every micro-batch without DDP's overlapped all-reduce, then "
                        "all-reduce the gradients at once, and say compute_ms= on the "
                        "progress line: this rank's own compute, apart from waiting for peers")
    p.add_argument("--fail-at-step", type=int, default=None,
                   help="raise a fake CUDA illegal-memory-access error at this iteration")
    p.add_argument("--fail-rank", type=int, default=0, help="rank that fails")
    p.add_argument("--fail-file", default=None,
                   help="raise the injected error on the step after this file appears "
                        "(any rank that sees it; the file is removed, so it fires once)")
    p.add_argument("--fail-generation", type=int, default=1,
                   help="fail only when $UNICRON_GENERATION (default 1) equals this")
    p.add_argument("--snapshot-every", type=int, default=1,
                   help="offer the unicron agent an in-memory snapshot every K "
                        "iterations; it keeps those of the planner's interval (0: never; "
                        "outside an agent it does nothing)")
    p.add_argument("--kill-in-save-file", default=None,
                   help="when this file appears, the rank that removes it is killed "
                        "(SIGKILL) halfway through handing over its next snapshot")
    args = p.parse_args(argv)
    for name in ("steps", "global_batch", "micro_batch", "seq_len", "vocab", "d_model",
                 "n_heads", "n_layers", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.d_model % args.n_heads:
        p.error("--d-model must be a multiple of --n-heads")
    return args


# ---------------------------------------------------------------- data


class MarkovCorpus:
    """A deterministic synthetic corpus: an order-1 Markov chain over the
    vocabulary in which every token has four possible successors, taken with
    probabilities 0.6/0.2/0.1/0.1.  The entropy rate is about 1.09 nats, so
    the loss falls from ln(vocab) towards that.

    Sample i is generated from its own seed, so any sample can be produced
    without the ones before it: the data of an iteration depends only on the
    iteration number, never on what this process did before (resume-safe)."""

    CUMULATIVE = (0.6, 0.8, 0.9, 1.0)

    def __init__(self, vocab, seed):
        self.vocab = vocab
        self.seed = seed
        rng = random.Random(f"markov-table-{seed}")
        self.successors = [[rng.randrange(vocab) for _ in range(4)] for _ in range(vocab)]

    def sample(self, index, length):
        rng = random.Random(f"markov-sample-{self.seed}-{index}")
        tok = rng.randrange(self.vocab)
        out = [tok]
        for _ in range(length - 1):
            u = rng.random()
            choice = next(i for i, c in enumerate(self.CUMULATIVE) if u < c)
            tok = self.successors[tok][choice]
            out.append(tok)
        return out

    def batch(self, first_index, count, seq_len):
        """Inputs and targets, each [count, seq_len], for samples
        first_index .. first_index+count-1."""
        rows = [self.sample(first_index + j, seq_len + 1) for j in range(count)]
        t = torch.tensor(rows, dtype=torch.long)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


# ---------------------------------------------------------------- model


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, seq_len):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        # A plain attribute, not a buffer: DDP broadcasts buffers and gloo has
        # no bool type.
        self.mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))

    def forward(self, x):
        b, t, c = x.shape
        hd = c // self.n_heads
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_heads, hd).transpose(1, 2)
        k = k.view(b, t, self.n_heads, hd).transpose(1, 2)
        v = v.view(b, t, self.n_heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, seq_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token + positional embedding, pre-LN transformer blocks with causal
    self-attention, final LayerNorm, LM head.  No dropout: training uses no
    randomness at all, so a resumed run is bit-identical to an unbroken one."""

    def __init__(self, vocab, seq_len, d_model, n_heads, n_layers):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, seq_len) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


# ---------------------------------------------------------------- checkpoints


def checkpoint_path(ckpt_dir, step):
    return os.path.join(ckpt_dir, f"ckpt-{step}.pt")


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path, write):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(ckpt_dir, step, model, optimizer, args, world_size):
    """Rank 0 only.  ckpt-<step>.pt first, then the `latest` pointer (which
    holds the step number), each written to a temporary file and renamed, so a
    crash at any moment leaves `latest` naming a complete checkpoint."""
    os.makedirs(ckpt_dir, exist_ok=True)
    state = {
        "step": step,
        "consumed_samples": step * args.global_batch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng_state": torch.get_rng_state(),
        "world_size": world_size,
        "args": vars(args),
    }
    _atomic_write(checkpoint_path(ckpt_dir, step), lambda f: torch.save(state, f))
    _atomic_write(os.path.join(ckpt_dir, "latest"), lambda f: f.write(f"{step}\n".encode()))
    _fsync_dir(ckpt_dir)


def find_latest_checkpoint(ckpt_dir):
    """The path of the newest complete checkpoint, or None.  Trusts `latest`;
    without it (or if it names a missing file) takes the highest ckpt-<n>.pt."""
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            step = int(f.read().strip())
        path = checkpoint_path(ckpt_dir, step)
        if os.path.exists(path):
            return path
    except (OSError, ValueError):
        pass
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        return None
    steps = [int(m.group(1)) for m in map(re.compile(r"ckpt-(\d+)\.pt$").match, names) if m]
    return checkpoint_path(ckpt_dir, max(steps)) if steps else None


# ---------------------------------------------------------------- training


def learning_rate(step, args):
    """Linear warm-up, then cosine decay to --min-lr at --steps.  A function of
    the iteration number only, so resume needs no scheduler state."""
    if step <= args.warmup:
        return args.lr * step / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * progress))


def all_reduce_gradients(model, world):
    """What DDP's backward does, at once after the compute: every rank ends
    with the mean of the ranks' gradients (one flat all-reduce)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def setup_distributed():
    if "WORLD_SIZE" not in os.environ:  # plain `python train.py`: one process
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("gloo", init_method="env://")
    return dist.get_rank(), dist.get_world_size()


def main(argv=None):
    args = parse_args(argv)
    rank, world = setup_distributed()
    generation = int(os.environ.get("UNICRON_GENERATION") or "1")
    resume_from = os.environ.get("UNICRON_RESUME_FROM") or "none"
    # torchrun's own --max-restarts also resumes from the newest checkpoint
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or "0")
    resume = resume_from != "none" or restarts > 0
    if resume_from == "none" and restarts > 0:
        resume_from = f"torchrun-restart:{restarts}"

    G, mb = args.global_batch, args.micro_batch
    if G % (world * mb):
        raise SystemExit(f"--global-batch {G} is not a multiple of world size {world} "
                         f"x --micro-batch {mb}")
    per_rank = G // world
    n_micro = per_rank // mb
    # Each micro-batch's mean loss is scaled so that after DDP divides the
    # summed gradients by the world size, the gradient is the mean over the
    # global batch.  mb*world/G is a power of two for power-of-two sizes, so
    # the scaling is exact: every micro-batch is computed bit-identically
    # whatever the world size, and only the order in which the micro-batch
    # gradients are summed differs (float32 rounding, ~1e-7 relative).
    loss_scale = mb * world / G

    torch.manual_seed(args.seed)
    corpus = MarkovCorpus(args.vocab, args.seed)
    model = GPT(args.vocab, args.seq_len, args.d_model, args.n_heads, args.n_layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=args.weight_decay)

    snapshots = unicron_client.default() if unicron_client and args.snapshot_every > 0 else None

    def from_disk():
        path = find_latest_checkpoint(args.checkpoint_dir)
        if path is None:
            log(f"rank {rank}: no checkpoint in {args.checkpoint_dir}, starting from scratch")
            return None
        log(f"rank {rank}: loaded checkpoint from {path}")
        return torch.load(path, map_location="cpu")

    start_step = 1
    if resume:
        state, source = None, "checkpoint"
        if snapshots is not None:
            restored = snapshots.restore(checkpoint=from_disk)
            if restored is not None:
                state, source = restored.state, restored.source
        else:
            state = from_disk()
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng_state"])
            start_step = state["step"] + 1
            log(f"rank {rank}: restored from {source} at iteration {state['step']}")

    # DDP broadcasts rank 0's weights (identical anyway).  The model has no
    # buffers, so DDP adds no broadcast to each forward.
    ddp = DDP(model)
    log(f"rank {rank}/{world} generation {generation} resume_from {resume_from} "
        f"starting at step {start_step}")
    if snapshots is not None and snapshots.active:
        log(f"rank {rank}: snapshots every {snapshots.every} steps (the planner's interval)")
    if rank == 0:
        log(f"time to initialize (seconds): {seconds_since_process_start():.3f}")

    # A restart by torchrun itself (--max-restarts) counts as recovered too.
    fail_here = (args.fail_at_step is not None and rank == args.fail_rank
                 and generation == args.fail_generation and restarts == 0)
    interval_ms, interval_loss, interval_n = 0.0, 0.0, 0
    interval_compute_ms = 0.0
    last_loss = None
    for step in range(start_step, args.steps + 1):
        t0 = time.perf_counter()

        def inject_failure():
            if fail_here and step == args.fail_at_step:
                raise RuntimeError(INJECTED_FAILURE)
            if args.fail_file and os.path.exists(args.fail_file):
                try:
                    os.remove(args.fail_file)
                except FileNotFoundError:
                    pass  # another rank took it
                else:
                    raise RuntimeError(INJECTED_FAILURE)

        lr = learning_rate(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # The global batch of iteration `step` is samples (step-1)*G .. step*G-1;
        # rank r takes the r-th contiguous slice of G/world of them.
        first = (step - 1) * G + rank * per_rank
        local_loss = 0.0
        optimizer.zero_grad(set_to_none=True)
        for i in range(n_micro):
            x, y = corpus.batch(first + i * mb, mb, args.seq_len)
            if i < n_micro - 1 or args.compute_timing:
                if i == n_micro - 1:
                    inject_failure()
                with ddp.no_sync():
                    loss = ddp(x, y)
                    (loss * loss_scale).backward()
            else:  # the last micro-batch's backward all-reduces the gradients
                loss = ddp(x, y)
                inject_failure()
                (loss * loss_scale).backward()
            local_loss += loss.item()
        if args.compute_timing:
            # This rank's own compute ends here; the all-reduce waits for
            # the slowest peer, so its time is not this rank's.
            interval_compute_ms += (time.perf_counter() - t0) * 1000.0
            all_reduce_gradients(model, world)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
        optimizer.step()
        total = torch.tensor([local_loss], dtype=torch.float64)
        dist.all_reduce(total)
        step_loss = total.item() / (G // mb)
        if snapshots is not None and step % args.snapshot_every == 0:
            # Between the planner's snapshot steps save() returns at once
            # (it only times the step), so no state is built for it.
            state = None
            if snapshots.due(step):
                if args.kill_in_save_file and os.path.exists(args.kill_in_save_file):
                    try:
                        os.remove(args.kill_in_save_file)
                        snapshots.kill_mid_save = True
                    except FileNotFoundError:
                        pass  # another rank took it
                # The data position is the step: the corpus is indexed by it.
                state = {
                    "step": step,
                    "consumed_samples": step * G,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "torch_rng_state": torch.get_rng_state(),
                    "world_size": world,
                }
            snapshots.save(step, state)
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        interval_ms += (time.perf_counter() - t0) * 1000.0
        interval_loss += step_loss
        interval_n += 1
        last_loss = step_loss

        if step % args.log_every == 0 or step == args.steps:
            log(f" iteration {step:8d}/{args.steps:8d} |"
                f" consumed samples: {step * G:12d} |"
                f" elapsed time per iteration (ms): {interval_ms / interval_n:.1f} |"
                f" learning rate: {lr:.3E} |"
                f" global batch size: {G:5d} |"
                f" lm loss: {interval_loss / interval_n:.6E} |"
                f" grad norm: {float(grad_norm):.3f} |"
                + (f" compute_ms={interval_compute_ms / interval_n:.1f} |" if args.compute_timing else ""))
            interval_ms, interval_loss, interval_n = 0.0, 0.0, 0
            interval_compute_ms = 0.0

        if args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            # Not counted in any iteration's time: the next iteration starts its
            # clock after the barrier.
            t_save = time.perf_counter()
            if rank == 0:
                log(f"saving checkpoint at iteration {step:7d} to {args.checkpoint_dir}")
                save_checkpoint(args.checkpoint_dir, step, model, optimizer, args, world)
                if args.checkpoint_sleep > 0:
                    time.sleep(args.checkpoint_sleep)
            dist.barrier()
            if rank == 0:
                log(f"  successfully saved checkpoint at iteration {step:7d} to "
                    f"{args.checkpoint_dir} ({(time.perf_counter() - t_save) * 1000:.1f} ms)")

    if snapshots is not None and snapshots.saves:
        log(f"rank {rank}: snapshot hand-over {snapshots.save_seconds * 1000 / snapshots.saves:.3f} ms "
            f"per save over {snapshots.saves} saves")
    if rank == 0:
        if last_loss is not None:
            log(f"final loss: {last_loss!r}")
        log(f"training done: {args.steps} steps")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
