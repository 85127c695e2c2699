"""Ansible callback of the one-box proof (tests/gpu/onebox.py enables it for each lane):
each task's start, in seconds since the proof began (ONEBOX_T0, a Unix time), appended to
ONEBOX_TIMING_FILE at once. A lane that the build budget cuts keeps the lines it wrote,
so the proof says where the box's build time went (configure, compile, install) even
for a component that did not finish."""

from __future__ import annotations

import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "onebox_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = os.environ.get("ONEBOX_TIMING_FILE")
        self.t0 = float(os.environ.get("ONEBOX_T0") or time.time())

    def note(self, what: str) -> None:
        if self.path:
            with open(self.path, "a") as out:  # noqa: PTH123 one line, appended as it happens
                out.write(f"{time.time() - self.t0:8.1f} s  {what}\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.note(task.get_name())

    def v2_playbook_on_stats(self, stats):
        self.note("(lane done)")
