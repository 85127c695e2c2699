#!/usr/bin/python
"""Stop build processes that an interrupted mpicluster run left running.

A killed `mpicluster up` does not stop what its last task started on the builder
(make keeps compiling with nobody waiting for it). Every build step runs with a
marker variable in its environment; this module finds such processes through
/proc and stops them, so a new build starts on a quiet machine.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_stop_builds
short_description: Stop processes carrying mpicluster's build marker
options:
  marker: {type: str, required: true, description: environment variable name}
"""

import contextlib
import os
import signal
import time


def marked_pids(marker, proc="/proc"):
    needle = (marker + "=").encode()
    found = []
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, name, "environ"), "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(needle) for v in variables):
            found.append(int(name))
    return sorted(found)


def stop(pids, grace=10.0):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if os.path.exists(f"/proc/{p}")]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return alive


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"marker": {"type": "str", "required": True}}, supports_check_mode=True
    )
    pids = marked_pids(module.params["marker"])
    if pids and not module.check_mode:
        killed = stop(pids)
        module.exit_json(changed=True, stopped=pids, forced=killed)
    module.exit_json(changed=False, stopped=[])


if __name__ == "__main__":
    main()
