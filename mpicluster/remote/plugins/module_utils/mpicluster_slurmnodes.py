"""slurmctld's node lines read the same way on every side: by the node's own health check
(remote/slurmnode.py) and by `mpicluster nodes` on the control machine."""

import re

#: "Reason=TEXT [user@time]" in `scontrol show node -o`.
REASON = re.compile(r"\bReason=(.*?) \[[^\[\]@]*@[^\[\]]*\]")


def parse_nodes(text):
    """{name: {"states": [...], "reason": str}} of `scontrol -o show nodes`."""
    found = {}
    for line in text.splitlines():
        name = re.search(r"^NodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        if not name or not state:
            continue
        reason = REASON.search(line)
        words = [w for w in state.group(1).replace("*", "").split("+") if w]
        found[name.group(1)] = {
            "states": words,
            "reason": reason.group(1).strip() if reason else "",
        }
    return found
