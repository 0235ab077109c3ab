"""The client snapshots only the steps the planner's interval names, and
tells the agent what each snapshot cost. The agent here is a socket that
records what a worker hands it (the real one is tested in Rust)."""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import unicron_client  # noqa: E402


class Recorder:
    """Accepts one worker connection and answers every save: held, and
    every slot but the one just handed over released."""

    def __init__(self, path):
        self.headers = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        conn, _ = self.listener.accept()
        buf = b""
        while True:
            data, fds, _, _ = socket.recv_fds(conn, 65536, 4)
            for fd in fds:
                os.close(fd)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                header = json.loads(line)
                self.headers.append(header)
                released = [i for i in range(header["slots"]) if i != header["slot"]]
                conn.sendall(json.dumps({"op": "reply", "ok": True,
                                         "released": released}).encode() + b"\n")


class Interval(unittest.TestCase):
    def test_only_multiples_of_the_interval_are_snapshotted_with_their_costs(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snapshots.sock")
            agent = Recorder(path)
            snapshots = unicron_client.Snapshots({
                "UNICRON_SNAPSHOT_SOCKET": path, "UNICRON_JOB": "j", "RANK": "0",
                "UNICRON_GENERATION": "2", "UNICRON_SNAPSHOT_EVERY": "4"})
            weights = torch.ones(1 << 16)
            for step in range(1, 14):
                time.sleep(0.002)  # a training step
                snapshots.save(step, {"w": weights})
            snapshots.flush()
            self.assertEqual([h["step"] for h in agent.headers], [4, 8, 12])
            self.assertEqual((snapshots.saves, snapshots.between), (3, 10))
            for h in agent.headers:
                self.assertGreater(h["block_us"], 0, h)
                self.assertGreaterEqual(h["step_us"], 2000, h)

    def test_without_an_interval_every_step_is_snapshotted(self):
        snapshots = unicron_client.Snapshots({"UNICRON_SNAPSHOT_SOCKET": "/x", "UNICRON_JOB": "j"})
        self.assertEqual(snapshots.every, 1)
        bad = unicron_client.Snapshots({"UNICRON_SNAPSHOT_SOCKET": "/x", "UNICRON_JOB": "j",
                                        "UNICRON_SNAPSHOT_EVERY": "0"})
        self.assertEqual(bad.every, 1)


if __name__ == "__main__":
    unittest.main()
