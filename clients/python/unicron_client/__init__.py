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
import time

from . import layout

__all__ = ["Restored", "Snapshots", "restore", "save", "flush", "default"]

#: What `restore` found: the state, where it came from (`memory`,
#: `replica:<node>` or `checkpoint`) and its step (None from a checkpoint
#: unless the loader's state says).
Restored = collections.namedtuple("Restored", ["state", "source", "step"])


#: Most slots a worker keeps: the agent holds up to three of its snapshots
#: (two the planner knows, one not yet reported); one more is written.
MAX_SLOTS = 4


#: Map with the pages in place (Linux); 0 where Python does not know it.
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class _Slot:
    """One buffer a snapshot is written into: a memfd (sealable, so the
    agent can forbid shrinking it), mapped, its pages touched once."""

    def __init__(self, ident, size):
        self.id = ident
        self.fd = os.memfd_create(f"unicron-snapshot-{ident}",
                                  os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        # Pages allocated by the kernel in one call and mapped in one go
        # (a Python loop touching each page is ten times slower).
        os.posix_fallocate(self.fd, 0, size)
        self.buf = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | _POPULATE)


class _Slots:
    """The worker's slots. A slot is written only when the agent does not
    hold it: each save's reply lists the slots it has released. Handing a
    slot over copies nothing: the agent maps the same pages, which outlive
    this process."""

    def __init__(self):
        self.slots = []
        self.free = set()
        # Being written or handed over: never freed by a release list.
        self.busy = set()
        self.lock = threading.Lock()

    def take(self, size):
        """A free slot of at least `size` bytes, or None when every slot
        is held (the save is skipped)."""
        with self.lock:
            fits = sorted((s for s in self.slots if s.id in self.free and len(s.buf) >= size),
                          key=lambda s: s.id)
            if fits:
                self.free.discard(fits[0].id)
                self.busy.add(fits[0].id)
                return fits[0]
            if len(self.slots) >= MAX_SLOTS:
                # Too small ones are dropped for bigger ones.
                small = [s for s in self.slots if s.id in self.free]
                if not small:
                    return None
                self.slots.remove(small[0])
                self.free.discard(small[0].id)
                small[0].buf.close()
                os.close(small[0].fd)
            ident = max((s.id for s in self.slots), default=-1) + 1
            # Room to grow a little without a new slot.
            slot = _Slot(ident, size + size // 16 + layout.ALIGN)
            self.slots.append(slot)
            self.busy.add(ident)
            return slot

    def count(self):
        with self.lock:
            return max((s.id for s in self.slots), default=-1) + 1

    def handed_over(self, slot, held, released):
        """`slot` went to the agent (`held`: the agent keeps it), whose
        reply lists `released`: the slots it holds no more."""
        with self.lock:
            self.busy.discard(slot.id)
            known = {s.id for s in self.slots}
            self.free.update(i for i in released if i in known and i not in self.busy)
            if held:
                self.free.discard(slot.id)
            else:
                self.free.add(slot.id)


class _Connection:
    """One Unix-socket connection to the agent: JSON header lines, each
    with the descriptors that go with it (SCM_RIGHTS): a save carries the
    slot's memfd, a restore's answer the snapshot's."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.buf = b""
        self.fds = []

    def send(self, header, fd=None):
        line = json.dumps(header).encode() + b"\n"
        if fd is None:
            self.sock.sendall(line)
        else:
            sent = socket.send_fds(self.sock, [line], [fd])
            if sent < len(line):
                self.sock.sendall(line[sent:])

    def reply(self):
        """The next header line, and the descriptor that came with it."""
        while b"\n" not in self.buf:
            data, fds, _, _ = socket.recv_fds(self.sock, 65536, 4)
            self.fds.extend(fds)
            if not data:
                raise ConnectionError("the agent closed the snapshot socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        fd = self.fds.pop(0) if self.fds else None
        for extra in self.fds:
            os.close(extra)
        self.fds = []
        return json.loads(line), fd

    def close(self):
        try:
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
        #: Snapshot the steps that are a multiple of this: the interval the
        #: planner chose for this start from measured costs (docs/agent.md).
        self.every = max(1, int(env.get("UNICRON_SNAPSHOT_EVERY", "1") or 1))
        self.active = bool(self.socket_path and self.job)
        #: Fault injection for tests: the next save writes half the state
        #: into its slot, then the process kills itself with SIGKILL.
        self.kill_mid_save = False
        #: Seconds the training thread spent in `save` (copying tensors).
        self.save_seconds = 0.0
        self.saves = 0
        self.last_error = None
        self._queue = queue.Queue(maxsize=1)
        self._slots = _Slots()
        #: Saves skipped because the agent held every slot.
        self.skipped = 0
        #: save() calls between snapshots, returned at once.
        self.between = 0
        # (time, step) of the previous save() call: the step time.
        self._last_call = None
        self._step_us = 0
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
                header, fd = conn.reply()
            finally:
                conn.close()
        except (OSError, ValueError) as e:
            self._warn(f"no snapshot from the agent ({e}); using the checkpoint")
            return None
        if not header.get("ok"):
            if fd is not None:
                os.close(fd)
            self._warn(f"no snapshot from the agent: {header.get('reason')}; "
                       f"using the checkpoint")
            return None
        if fd is None:
            self._warn("the agent's answer carried no snapshot; using the checkpoint")
            return None
        try:
            # Private: the tensors are views of the agent's pages, and a
            # write to them (there should be none) copies a page here.
            size = header.get("len") or 0
            # Not populated: on a private writable mapping that would copy
            # every page up front.
            buf = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE) if size else bytearray()
        except (OSError, ValueError) as e:
            self._warn(f"the agent's snapshot cannot be mapped ({e}); using the checkpoint")
            return None
        finally:
            os.close(fd)
        try:
            _, state = layout.read(buf)
        except layout.LayoutError as e:
            self._warn(f"the agent's snapshot is unreadable ({e}); using the checkpoint")
            return None
        return Restored(state, header.get("source") or "memory", header.get("step"))

    # ------------------------------------------------------------ save

    def due(self, step):
        """Whether `save(step, ...)` would snapshot: lets a script skip
        building a state that would not be kept."""
        return self.active and int(step) % self.every == 0

    def save(self, step, state):
        """Hands a snapshot of `state` after training step `step` to the
        agent. Returns once the tensors' bytes are copied (one copy, into a
        buffer allocated once); the transfer runs in the background. If the
        previous snapshot is still on its way, waits for it (at most one in
        flight, one waiting). Steps that are not a multiple of the interval
        the planner chose (`every`) return at once: a script may call this
        every step. A state holding anything but tensors, plain values,
        bytes, lists, tuples and dicts raises TypeError."""
        if not self.active:
            return
        t0 = time.perf_counter()
        step = int(step)
        if self._last_call is not None and step > self._last_call[1]:
            self._step_us = int((t0 - self._last_call[0]) / (step - self._last_call[1]) * 1e6)
        self._last_call = (t0, step)
        if step % self.every:
            self.between += 1
            return
        header, tensors, size = layout.plan(step, state)
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_loop, name="unicron-snapshots",
                                            daemon=True)
            self._thread.start()
        slot = self._slots.take(size)
        if slot is None:
            self.skipped += 1
            self._warn(f"snapshot of step {step} skipped: the agent still holds every slot")
        else:
            if self.kill_mid_save:
                # Fault injection (tests): die halfway through writing.
                self._warn(f"fault injection: dying halfway through writing the snapshot "
                           f"of step {step}")
                layout.write(slot.buf, header, tensors[:len(tensors) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            layout.write(slot.buf, header, tensors)
            blocked_us = int((time.perf_counter() - t0) * 1e6)
            self._queue.put((step, slot, size, blocked_us, self._step_us))
        self.save_seconds += time.perf_counter() - t0
        self.saves += 1

    def flush(self):
        """Waits until every snapshot handed over has reached the agent."""
        if self._thread is not None:
            self._queue.join()

    def _send_loop(self):
        while True:
            step, slot, size, block_us, step_us = self._queue.get()
            held, released = False, []
            try:
                # The costs go to the planner, which sets `every` from them
                # at the job's next start.
                header = {"op": "save", "job": self.job, "rank": self.rank, "step": step,
                          "generation": self.generation, "len": size, "slot": slot.id,
                          "slots": self._slots.count(), "block_us": block_us,
                          "step_us": step_us}
                if self._conn is None:
                    self._conn = _Connection(self.socket_path)
                self._conn.send(header, slot.fd)
                answer, fd = self._conn.reply()
                if fd is not None:
                    os.close(fd)
                released = answer.get("released") or []
                held = bool(answer.get("ok"))
                if not held:
                    raise RuntimeError(answer.get("reason") or "refused")
            except Exception as e:  # the training goes on without snapshots
                self.last_error = str(e)
                self._warn(f"snapshot of step {step} not handed over: {e}")
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            finally:
                self._slots.handed_over(slot, held, released)
                self._queue.task_done()

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
