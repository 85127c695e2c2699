"""Slurm on the cluster (`scheduler: {type: slurm}`), the whole feature in one room: what
`up` installs and configures (config), its part of the smoke test (smoke) and the facts
doctor's slurm check judges (facts)."""

from mpicluster.slurm.config import (
    CONF_DIR,
    CONF_FILES,
    LEFTOVERS,
    MARKER,
    MUNGE_KEY,
    MUNGE_TTL,
    PMIX_ENV,
    RECORD,
    SLURM_CONF,
    USERS,
    ensure_munge_key,
    munge_key_path,
    scheduler_vars,
    teardown_vars,
)
from mpicluster.slurm.facts import SlurmFacts
from mpicluster.slurm.facts import gather as gather_facts
from mpicluster.slurm.smoke_steps import RESUME, SlurmSmoke, munge_cause, ready, run_slurm_smoke

__all__ = [
    "CONF_DIR",
    "CONF_FILES",
    "LEFTOVERS",
    "MARKER",
    "MUNGE_KEY",
    "MUNGE_TTL",
    "PMIX_ENV",
    "RECORD",
    "RESUME",
    "SLURM_CONF",
    "USERS",
    "SlurmFacts",
    "SlurmSmoke",
    "ensure_munge_key",
    "gather_facts",
    "munge_cause",
    "munge_key_path",
    "ready",
    "run_slurm_smoke",
    "scheduler_vars",
    "teardown_vars",
]
