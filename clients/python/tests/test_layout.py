"""The raw snapshot layout: what goes in comes out, tensors as views of the
buffer, and damaged or foreign snapshots are refused with a reason."""

import collections
import json
import os
import struct
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from unicron_client import layout  # noqa: E402


def snapshot(state, step=7):
    header, tensors, size = layout.plan(step, state)
    buf = bytearray(size)
    layout.write(buf, header, tensors)
    return buf


class Layout(unittest.TestCase):
    def test_a_training_state_comes_back_equal(self):
        model = torch.nn.Linear(5, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.randn(2, 5)).sum().backward()
        opt.step()
        state = {
            "step": 7,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "rng": torch.get_rng_state(),
            "mask": torch.tensor([True, False, True]),
            "half": torch.arange(6, dtype=torch.float16).reshape(2, 3),
            "strided": torch.arange(12.0).reshape(3, 4).t(),
            "empty": torch.zeros(0, 4),
            "scalar": torch.tensor(3.5, dtype=torch.float64),
            "misc": (1, "a", None, 2.5, b"\x00\xff", [1, (2, 3)]),
        }
        step, got = layout.read(snapshot(state))
        self.assertEqual(step, 7)
        self.assertIsInstance(got["model"], collections.OrderedDict)
        self.assertEqual(list(got["model"]), list(state["model"]))
        for k, v in state["model"].items():
            self.assertTrue(torch.equal(got["model"][k], v), k)
        # Optimizer state is keyed by int; param_groups hold tuples.
        self.assertEqual(sorted(got["optimizer"]["state"]), [0, 1])
        self.assertEqual(got["optimizer"]["param_groups"][0]["betas"],
                         state["optimizer"]["param_groups"][0]["betas"])
        self.assertTrue(torch.equal(got["optimizer"]["state"][0]["exp_avg"],
                                    state["optimizer"]["state"][0]["exp_avg"]))
        for k in ("rng", "mask", "half", "strided", "empty", "scalar"):
            self.assertEqual(got[k].dtype, state[k].dtype, k)
            self.assertTrue(torch.equal(got[k], state[k]), k)
        self.assertEqual(got["misc"], state["misc"])
        # It loads back into a model.
        other = torch.nn.Linear(5, 3)
        other.load_state_dict(got["model"])
        opt2 = torch.optim.AdamW(other.parameters(), lr=1e-3)
        opt2.load_state_dict(got["optimizer"])

    def test_tensors_are_views_of_the_buffer_not_copies(self):
        buf = snapshot({"w": torch.ones(1000)})
        _, got = layout.read(buf)
        start = layout.data_start(struct.unpack("<Q", buf[16:24])[0])
        buf[start:] = bytes(len(buf) - start)  # the data of w, zeroed in place
        self.assertEqual(float(got["w"].sum()), 0.0)

    def test_tensor_data_is_aligned(self):
        header, tensors, _ = layout.plan(1, {"a": torch.ones(3), "b": torch.ones(5)})
        self.assertEqual([off % layout.ALIGN for _, off, _ in tensors], [0, 0])
        self.assertEqual(layout.data_start(len(header)) % layout.ALIGN, 0)

    def test_what_cannot_be_restored_without_code_is_refused_at_save(self):
        with self.assertRaisesRegex(TypeError, r"state\['opt'\]: a object is not kept"):
            layout.plan(1, {"opt": object()})

    def test_a_foreign_or_damaged_snapshot_is_refused(self):
        with self.assertRaisesRegex(layout.LayoutError, "not a raw snapshot"):
            layout.read(bytearray(b"\x80\x02pickle" * 10))
        good = snapshot({"w": torch.ones(100)})
        with self.assertRaisesRegex(layout.LayoutError, "header of .* runs past"):
            bad = bytearray(good)
            bad[16:24] = struct.pack("<Q", len(good))
            layout.read(bad)
        with self.assertRaisesRegex(layout.LayoutError, "data of .* runs past"):
            layout.read(good[:-1])
        # A header whose tensor offset runs past the data.
        hlen = struct.unpack("<Q", good[16:24])[0]
        header = json.loads(bytes(good[24:24 + hlen]))
        header["tensors"][0]["offset"] = 64
        forged = json.dumps(header, separators=(",", ":")).encode()
        self.assertEqual(layout.data_start(len(forged)), layout.data_start(hlen))
        bad = bytearray(good)
        bad[24:24 + len(forged)] = forged
        bad[16:24] = struct.pack("<Q", len(forged))
        with self.assertRaisesRegex(layout.LayoutError, "tensor 0: bytes 64..464 run past"):
            layout.read(bad)
        # A shape that does not match the bytes.
        header["tensors"][0]["offset"] = 0
        header["tensors"][0]["shape"] = [99]
        forged = json.dumps(header, separators=(",", ":")).encode()
        bad = bytearray(good)
        bad[24:24 + len(forged)] = forged
        bad[16:24] = struct.pack("<Q", len(forged))
        with self.assertRaises(layout.LayoutError):
            layout.read(bad)


if __name__ == "__main__":
    unittest.main()
