"""Exit codes of the mpicluster command, one name per meaning.

They are part of the interface: scripts and CI jobs branch on them.
"""

OK = 0
#: Something failed that is not one of the cases below (a tool missing, a build failing).
FAILED = 1
#: Bad input: an invalid inventory, a bad option. Nothing was changed on any node.
USAGE = 2
#: One or more hosts failed a task (they were reachable).
HOSTS_FAILED = 3
#: One or more hosts could not be reached (and none that was reached failed).
HOSTS_UNREACHABLE = 4
#: The smoke test ran and found the cluster broken.
SMOKE_FAILED = 5
#: Interrupted by the user (Ctrl-C).
INTERRUPTED = 130

#: doctor: every check passed / at least one warning / at least one failure.
DOCTOR_PASS = 0
DOCTOR_WARN = 1
DOCTOR_FAIL = 2
