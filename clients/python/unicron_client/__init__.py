"""unicron's client for training scripts: in-memory snapshots held by the
node's `unicron agent`, replicated to a peer node, restored after a failure
from memory, from the peer, or from the job's disk checkpoint.

    import unicron_client

    restored = unicron_client.restore(checkpoint=load_my_checkpoint)
    if restored is not None:
        model.load_state_dict(restored.state["model"]); ...
        start = restored.step + 1
    for step in range(start, steps + 1):
        train_one_step()
        unicron_client.save(step, {"model": model.state_dict(), ...})

`save` copies the tensors' bytes once, into one of two buffers allocated
once and reused (the raw layout of `unicron_client.layout`: no pickle), and
a background thread hands that buffer to the agent, so the next step
overlaps the transfer. Outside a unicron agent (`UNICRON_SNAPSHOT_SOCKET`
unset) `save` does nothing and `restore` only calls the given checkpoint
loader, so the script runs the same under torchrun. Needs nothing but
Python 3 and PyTorch. See docs/agent.md.
"""

import collections
import json
import mmap
import os
import queue
import signal
import socket
import sys
import threading

from . import layout

__all__ = ["Restored", "Snapshots", "restore", "save", "flush", "default"]

#: What `restore` found: the state, where it came from (`memory`,
#: `replica:<node>` or `checkpoint`) and its step (None from a checkpoint
#: unless the loader's state says).
Restored = collections.namedtuple("Restored", ["state", "source", "step"])


class _Slots:
    """Two buffers a snapshot is written into, alternately: allocated once
    (anonymous shared memory, pages touched up front so the first save pays
    no page faults), grown only when a state outgrows them. A slot is
    written again only once the background thread has handed it over."""

    def __init__(self):
        self.buffers = [None, None]
        self.free = [threading.Event(), threading.Event()]
        for f in self.free:
            f.set()
        self.next = 0

    def take(self, size):
        """(index, buffer) of the next slot, once it is free."""
        i = self.next
        self.next = 1 - i
        self.free[i].wait()
        self.free[i].clear()
        buf = self.buffers[i]
        if buf is None or len(buf) < size:
            if buf is not None:
                buf.close()
            # Room to grow a little without reallocating.
            buf = mmap.mmap(-1, size + size // 16 + layout.ALIGN)
            for off in range(0, len(buf), mmap.PAGESIZE):
                buf[off] = 0
            self.buffers[i] = buf
        return i, buf

    def release(self, i):
        self.free[i].set()


class _Connection:
    """One Unix-socket connection to the agent: a JSON header line, then
    the payload; every request gets a header line back (and a payload for
    a restore)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")

    def send(self, header, payload=b"", abort_after=None):
        line = json.dumps(header).encode() + b"\n"
        if abort_after is None:
            self.sock.sendall(line)
            self.sock.sendall(payload)
            return
        # Fault injection (tests): part of the payload, then death.
        self.sock.sendall(line + payload[:abort_after])
        os.kill(os.getpid(), signal.SIGKILL)

    def reply(self):
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the agent closed the snapshot socket")
        header = json.loads(line)
        payload = bytearray()
        if header.get("ok") and header.get("len"):
            # Writable, so restored tensors can be views of it.
            payload = bytearray(header["len"])
            view, got = memoryview(payload), 0
            while got < len(payload):
                n = self.reader.readinto(view[got:])
                if not n:
                    raise ConnectionError("the agent's answer was cut short")
                got += n
        return header, payload

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


class Snapshots:
    """Snapshots of one worker process, as the agent that started it
    describes it in the environment."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.socket_path = env.get("UNICRON_SNAPSHOT_SOCKET") or None
        self.job = env.get("UNICRON_JOB", "")
        self.rank = int(env.get("RANK", "0") or 0)
        self.generation = int(env.get("UNICRON_GENERATION", "0") or 0)
        self.resume_from = env.get("UNICRON_RESUME_FROM") or None
        self.active = bool(self.socket_path and self.job)
        #: Fault injection for tests: the next save sends half its payload,
        #: then the process kills itself with SIGKILL.
        self.kill_mid_save = False
        #: Seconds the training thread spent in `save` (copying tensors).
        self.save_seconds = 0.0
        self.saves = 0
        self.last_error = None
        self._queue = queue.Queue(maxsize=1)
        self._slots = _Slots()
        self._thread = None
        self._conn = None
        self._warned = False

    # ------------------------------------------------------------ restore

    def restore(self, checkpoint=None):
        """The state to resume from, or None on a first start.

        From this node's agent (its memory, or a replica it fetched from a
        peer) when the planner's start command chose a step; otherwise the
        result of `checkpoint()` (the job's disk checkpoint), if given."""
        if self.active and self.resume_from and self.resume_from != "checkpoint":
            got = self._restore_from_agent()
            if got is not None:
                return got
        if checkpoint is None or (self.active and not self.resume_from):
            return None
        state = checkpoint()
        if state is None:
            return None
        step = state.get("step") if isinstance(state, dict) else None
        return Restored(state, "checkpoint", step)

    def _restore_from_agent(self):
        try:
            conn = _Connection(self.socket_path)
            try:
                conn.send({"op": "restore", "job": self.job, "rank": self.rank,
                           "generation": self.generation})
                header, payload = conn.reply()
            finally:
                conn.close()
        except (OSError, ValueError) as e:
            self._warn(f"no snapshot from the agent ({e}); using the checkpoint")
            return None
        if not header.get("ok"):
            self._warn(f"no snapshot from the agent: {header.get('reason')}; "
                       f"using the checkpoint")
            return None
        try:
            _, state = layout.read(payload)
        except layout.LayoutError as e:
            self._warn(f"the agent's snapshot is unreadable ({e}); using the checkpoint")
            return None
        return Restored(state, header.get("source") or "memory", header.get("step"))

    # ------------------------------------------------------------ save

    def save(self, step, state):
        """Hands a snapshot of `state` after training step `step` to the
        agent. Returns once the tensors' bytes are copied (one copy, into a
        buffer allocated once); the transfer runs in the background. If the
        previous snapshot is still on its way, waits for it (at most one in
        flight, one waiting). A state holding anything but tensors, plain
        values, bytes, lists, tuples and dicts raises TypeError."""
        if not self.active:
            return
        import time

        t0 = time.perf_counter()
        header, tensors, size = layout.plan(int(step), state)
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_loop, name="unicron-snapshots",
                                            daemon=True)
            self._thread.start()
        slot, buf = self._slots.take(size)
        layout.write(buf, header, tensors)
        self._queue.put((int(step), slot, buf, size, self.kill_mid_save))
        self.save_seconds += time.perf_counter() - t0
        self.saves += 1

    def flush(self):
        """Waits until every snapshot handed over has reached the agent."""
        if self._thread is not None:
            self._queue.join()

    def _send_loop(self):
        while True:
            step, slot, buf, size, kill = self._queue.get()
            try:
                header = {"op": "save", "job": self.job, "rank": self.rank, "step": step,
                          "generation": self.generation, "len": size}
                payload = memoryview(buf)[:size]
                self._send(header, payload, size // 2 if kill else None)
            except Exception as e:  # the training goes on without snapshots
                self.last_error = str(e)
                self._warn(f"snapshot of step {step} not handed over: {e}")
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            finally:
                self._slots.release(slot)
                self._queue.task_done()

    def _send(self, header, payload, abort_after):
        if self._conn is None:
            self._conn = _Connection(self.socket_path)
        self._conn.send(header, payload, abort_after)
        answer, _ = self._conn.reply()
        if not answer.get("ok"):
            raise RuntimeError(answer.get("reason") or "refused")

    def _warn(self, message):
        sys.stderr.write(f"unicron_client: rank {self.rank}: {message}\n")
        sys.stderr.flush()


_default = None


def default():
    """The process's `Snapshots`, made on first use."""
    global _default
    if _default is None:
        _default = Snapshots()
    return _default


def restore(checkpoint=None):
    """`default().restore(checkpoint)`."""
    return default().restore(checkpoint)


def save(step, state):
    """`default().save(step, state)`."""
    default().save(step, state)


def flush():
    """`default().flush()`."""
    default().flush()
