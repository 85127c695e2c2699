"""The site's own command at each change of a node's state (`health: {on_change: CMD}`),
run the same way on both sides: by the node's check under Slurm (remote/slurmnode.py) and
by the control machine at a cordon or return (mpicluster/health/site_command.py)."""

import subprocess

#: The longest the command may take (it is a hook: a page, a ticket, a webhook).
TIMEOUT = 15


def run_site_command(command, node, state, reason, label="on_change", env=None):
    """`CMD NODE STATE REASON` through /bin/sh, each word whole: None when it ran well,
    else one line saying why (never an error: the change is made)."""
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command + ' "$@"', "on_change", node, state, reason],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "%s: %s" % (label, exc)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [""])[-1]
        return "%s exited %d: %s" % (label, done.returncode, said)
    return None
