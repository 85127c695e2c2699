"""Print which NCCL PyTorch loads: its version and the files mapped (as JSON).

Run by the build's verify step with the stack's Python; needs no GPU.
"""

import json
import os
import sys

import torch


def mapped(name="libnccl.so"):
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(name):
                paths.add(fields[5].strip())
    return sorted(paths)


version = torch.cuda.nccl.version()
if isinstance(version, int):  # old releases: 2708
    version = (version // 1000, version // 100 % 10, version % 100)
sys.stdout.write(json.dumps({"version": ".".join(map(str, version)), "loaded": mapped()}) + "\n")
