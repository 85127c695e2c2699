"""mpicluster doctor: fast parallel checks for what breaks MPI clusters.

`run_doctor(plan, ...)` (examine.py) gathers facts from every node in one round trip per
phase (see runner.py), judges them with the checks (checks/), and returns a
`DoctorReport`; it never prints. The command is mpicluster/cli/doctor.py, the
rendering mpicluster/render/doctor.py. `cordon_findings(report, plan)` (cordoning.py) is
the report as `--cordon` reads it.
"""

from mpicluster.doctor.cordoning import cordon_findings
from mpicluster.doctor.examine import run_doctor, select_checks
from mpicluster.doctor.model import DoctorReport, Status

__all__ = ["DoctorReport", "Status", "cordon_findings", "run_doctor", "select_checks"]
