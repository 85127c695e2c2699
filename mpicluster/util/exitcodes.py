"""Exit codes of the mpicluster command: one table for every command, each code one
meaning (docs/exit-codes.md says the same; a unit test holds the two together).

They are part of the interface: scripts and CI jobs branch on them. The one exception
is `run` (and `logs`) once the job ran: it exits with the job's own status, and its last
line on stderr, `job exited with N`, says so.
"""

OK = 0
#: A failure not listed below: a build, a tool missing, an internal error.
FAILED = 1
#: Bad input only: usage, an invalid inventory, an unknown node or job id. Nothing was
#: changed on any node.
USAGE = 2
#: One or more hosts failed a task (they were reachable).
HOSTS_FAILED = 3
#: One or more hosts could not be reached (and none that was reached failed).
HOSTS_UNREACHABLE = 4
#: A check ran and found the cluster broken: the smoke test, a doctor failure, a slow
#: node or link bench flagged, a node `nodes` finds not ready.
CHECK_FAILED = 5
#: Warnings only: a check (doctor, bench) found something to say, and nothing failed.
WARNINGS = 6
#: `run`: the job was stopped by --hang-timeout (as timeout(1) exits).
HANG_TIMEOUT = 124
#: Interrupted: Ctrl-C or SIGTERM.
INTERRUPTED = 130

#: Every code with its one meaning, in the words of docs/exit-codes.md.
TABLE: dict[int, str] = {
    OK: "success",
    FAILED: "a failure not listed below: a build, a missing tool, an internal error",
    USAGE: "bad input only: usage, an invalid inventory, an unknown node or job id "
    "(nothing was changed on any node)",
    HOSTS_FAILED: "a host failed a task (it was reachable)",
    HOSTS_UNREACHABLE: "a host could not be reached (and none that was reached failed)",
    CHECK_FAILED: "a check ran and found the cluster broken: the smoke test, a doctor "
    "failure, a slow node or link bench flagged, a node `nodes` finds not ready",
    WARNINGS: "warnings only (doctor, bench): nothing failed",
    HANG_TIMEOUT: "`run`: the job was stopped by --hang-timeout",
    INTERRUPTED: "interrupted (Ctrl-C or SIGTERM)",
}
