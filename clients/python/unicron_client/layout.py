"""The raw snapshot layout: tensors as their bytes, nothing pickled.

    magic   16 bytes  b"UNICRON-SNAP-v2\\n"
    hlen    8 bytes   little-endian length of the header
    header  hlen      JSON: {"step", "state", "tensors", "data_len"}
    pad     to 64
    data    data_len  each tensor's bytes at its offset (64-aligned)

`state` is the saved structure with each tensor replaced by {"__t": i},
an index into `tensors` ({"dtype", "shape", "offset", "nbytes"}); dicts,
tuples and bytes are tagged so that they come back as they were. Only
plain values (str, int, float, bool, None), bytes, lists, tuples, dicts
and tensors are kept: anything else is refused when saved, so restore never
has to run code from a snapshot.
"""

import base64
import collections
import json
import struct

MAGIC = b"UNICRON-SNAP-v2\n"
ALIGN = 64
_PREFIX = len(MAGIC) + 8


class LayoutError(ValueError):
    """A snapshot that is not in this layout, or whose header does not fit
    its buffer."""


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan(step, state):
    """The header of `state` and its tensors in data order: (header bytes,
    [(tensor, offset, nbytes)], total bytes of the snapshot)."""
    import torch

    tensors = []
    entries = []
    offset = 0

    def enc(obj, path):
        nonlocal offset
        if isinstance(obj, torch.Tensor):
            nbytes = obj.numel() * obj.element_size()
            entries.append({"dtype": str(obj.dtype).removeprefix("torch."),
                            "shape": list(obj.shape), "offset": offset, "nbytes": nbytes})
            tensors.append((obj, offset, nbytes))
            offset = _align(offset + nbytes)
            return {"__t": len(entries) - 1}
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, (bytes, bytearray)):
            return {"__b": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, dict):
            tag = "__od" if isinstance(obj, collections.OrderedDict) else "__d"
            return {tag: [[enc(k, path + "[key]"), enc(v, f"{path}[{k!r}]")]
                          for k, v in obj.items()]}
        if isinstance(obj, list):
            return [enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        if isinstance(obj, tuple):
            return {"__tu": [enc(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(f"snapshot state{path}: a {type(obj).__name__} is not kept in a "
                        "snapshot (tensors, str, int, float, bool, None, bytes, lists, "
                        "tuples and dicts are)")

    skeleton = enc(state, "")
    header = json.dumps({"step": step, "state": skeleton, "tensors": entries,
                         "data_len": offset}, separators=(",", ":")).encode()
    return header, tensors, data_start(len(header)) + offset


def data_start(header_len):
    return _align(_PREFIX + header_len)


def write(buf, header, tensors):
    """Writes the snapshot into `buf` (a writable buffer at least as large
    as `plan` said): one copy of each tensor's bytes. GPU tensors go
    straight from the device into `buf`: it is pinned once (slots are
    reused), and the copies run on a side stream, without blocking, after
    the work that produced the tensors; `write` returns once they landed."""
    import torch

    view = memoryview(buf)
    view[:len(MAGIC)] = MAGIC
    view[len(MAGIC):_PREFIX] = struct.pack("<Q", len(header))
    view[_PREFIX:_PREFIX + len(header)] = header
    base = data_start(len(header))
    on_gpu = [t for t, _, n in tensors if n and t.device.type == "cuda"]
    side = _side_stream(buf, on_gpu[0].device) if on_gpu else None
    for t, offset, nbytes in tensors:
        if nbytes == 0:
            continue
        dst = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=base + offset)
        src = t.detach()
        if src.device.type == "cuda":
            with torch.cuda.stream(side):
                dst.copy_(src.contiguous().reshape(-1).view(torch.uint8), non_blocking=True)
            continue
        if src.device.type != "cpu":
            src = src.to("cpu")
        dst.copy_(src.contiguous().reshape(-1).view(torch.uint8))
    if side is not None:
        side.synchronize()


#: Buffers registered with CUDA as pinned: (address, length).
_PINNED = set()
#: One side stream per device for device-to-host copies.
_STREAMS = {}


def _side_stream(buf, device):
    """The side stream for `device`, made to wait for the work queued so
    far on the current one; pins `buf` for DMA once. Written for GPUs and
    not run here (the test machine has none): without the pinning the
    copies are still right, only synchronous."""
    import torch

    whole = torch.frombuffer(buf, dtype=torch.uint8)
    key = (whole.data_ptr(), whole.numel())
    if key not in _PINNED:
        if int(torch.cuda.cudart().cudaHostRegister(key[0], key[1], 0)) == 0:
            _PINNED.add(key)
    side = _STREAMS.get(device)
    if side is None:
        side = _STREAMS[device] = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    return side


def read(buf):
    """(step, state) of a snapshot in `buf`; tensors are views of `buf`
    (no copy), so keep `buf` alive while they are used. LayoutError if it
    is not one, or its header does not fit."""
    import torch

    view = memoryview(buf)
    if len(view) < _PREFIX or bytes(view[:len(MAGIC)]) != MAGIC:
        raise LayoutError("not a raw snapshot")
    (hlen,) = struct.unpack("<Q", view[len(MAGIC):_PREFIX])
    if _PREFIX + hlen > len(view):
        raise LayoutError(f"header of {hlen} bytes runs past the {len(view)}-byte snapshot")
    try:
        header = json.loads(bytes(view[_PREFIX:_PREFIX + hlen]))
        entries = header["tensors"]
        data_len = int(header["data_len"])
    except (ValueError, KeyError, TypeError) as e:
        raise LayoutError(f"header unreadable: {e}") from None
    base = data_start(hlen)
    if base + data_len > len(view):
        raise LayoutError(f"data of {data_len} bytes runs past the {len(view)}-byte snapshot")
    made = []
    for i, e in enumerate(entries):
        try:
            dtype = getattr(torch, e["dtype"])
            shape = [int(d) for d in e["shape"]]
            offset, nbytes = int(e["offset"]), int(e["nbytes"])
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            raise LayoutError(f"tensor {i}: {err}") from None
        if not isinstance(dtype, torch.dtype):
            raise LayoutError(f"tensor {i}: {e['dtype']!r} is no dtype")
        if offset < 0 or nbytes < 0 or offset + nbytes > data_len:
            raise LayoutError(f"tensor {i}: bytes {offset}..{offset + nbytes} run past the "
                              f"{data_len} bytes of data")
        count = 1
        for d in shape:
            count *= d
        size = torch.tensor([], dtype=dtype).element_size()
        if count * size != nbytes or any(d < 0 for d in shape):
            raise LayoutError(f"tensor {i}: shape {shape} of {e['dtype']} is not "
                              f"{nbytes} bytes")
        if nbytes == 0:
            made.append(torch.empty(shape, dtype=dtype))
            continue
        flat = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=base + offset)
        made.append(flat.view(dtype).reshape(shape))

    def dec(obj):
        if isinstance(obj, list):
            return [dec(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        if "__t" in obj:
            return made[obj["__t"]]
        if "__tu" in obj:
            return tuple(dec(v) for v in obj["__tu"])
        if "__b" in obj:
            return base64.b64decode(obj["__b"])
        if "__od" in obj:
            return collections.OrderedDict((_key(dec(k)), dec(v)) for k, v in obj["__od"])
        return {_key(dec(k)): dec(v) for k, v in obj.get("__d", [])}

    try:
        return header.get("step"), dec(header["state"])
    except (IndexError, KeyError, TypeError, ValueError) as e:
        raise LayoutError(f"state unreadable: {e}") from None


def _key(k):
    return tuple(k) if isinstance(k, list) else k
