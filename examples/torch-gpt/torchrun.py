#!/usr/bin/python3
"""torchrun for Debian's python3-torch 1.13 on Python 3.11.

Use exactly like torchrun:

    /usr/bin/python3 examples/torch-gpt/torchrun.py --nnodes 1 --nproc-per-node 2 \\
        --max-restarts 1 examples/torch-gpt/train.py --steps 30

It fixes two things before handing over to torch.distributed.run.main():

1. Debian's torchrun dies at start with
       AttributeError: 'NoneType' object has no attribute 'get'   (in to_map)
   Std.from_str("0") finds its member by iterating over the IntFlag `Std`,
   and since Python 3.11 iterating a flag class yields only its single-bit
   members: NONE (0) and ALL (3) are never found, so the default
   `--redirects 0` / `--tee 0` become None.  The replacement looks the value
   up by value, Std(int(v)).

2. torch 1.13 spells its options with underscores only (--nproc_per_node,
   --max_restarts, ...); newer torchrun also accepts --nproc-per-node etc.
   Every underscore option gets its hyphenated spelling as an alias.
   Arguments after the training script are passed on untouched.
"""

import re
import sys

import torch.distributed.run as torch_run
from torch.distributed.elastic.multiprocessing import api as mp_api
from torch.distributed.elastic.multiprocessing.api import Std


def _std_from_str(cls, vm):
    """Std.from_str, with members looked up by value ("0" -> Std.NONE,
    "3" -> Std.ALL, "0:3,1:0" -> {0: Std.ALL, 1: Std.NONE})."""
    if re.match(mp_api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(mp_api._MAPPING_REGEX, vm):
        out = {}
        for item in vm.split(","):
            i, v = item.split(":")
            out[int(i)] = cls(int(v))
        return out
    raise ValueError(f"{vm} does not match: <{mp_api._VALUE_REGEX}> or <{mp_api._MAPPING_REGEX}>")


_original_get_args_parser = torch_run.get_args_parser


def _get_args_parser():
    parser = _original_get_args_parser()
    for action in parser._actions:
        for opt in list(action.option_strings):
            if opt.startswith("--") and "_" in opt:
                alias = opt.replace("_", "-")
                if alias not in parser._option_string_actions:
                    action.option_strings.append(alias)
                    parser._option_string_actions[alias] = action
    return parser


def patch():
    Std.from_str = classmethod(_std_from_str)
    torch_run.get_args_parser = _get_args_parser


def main():
    patch()
    torch_run.main()


if __name__ == "__main__":
    sys.exit(main())
