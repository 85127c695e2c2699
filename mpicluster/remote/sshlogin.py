"""A user's non-interactive ssh login on this node (what mpirun's daemons, and so the
ranks, get), reproduced without sshd: what the node's own health check measures, as
root, for the MPI user. doctor's probe needs none of it: it runs in a real such login.

For `ssh node command`, sshd starts `SHELL -c command` as the user, in their home, with
a few variables of its own (USER, LOGNAME, HOME, SHELL, MAIL, its default PATH,
SSH_CLIENT, SSH_CONNECTION), pam_env's over them (/etc/environment and
/etc/default/locale, read literally: pam_env expands nothing there), and pam_limits'
limits (limits.conf, then limits.d, over sshd's own). Here the same: a child takes those
limits, becomes the user and starts their shell with that environment; SSH_CLIENT set
and no SHLVL make bash read /etc/bash.bashrc and ~/.bashrc as it does under sshd (zsh
reads its zshenv files anyway), so their lines count; the command the shell runs reports
the environment and the limits it ends with.

What only a real login sees: sshd's own settings (UsePAM, Match blocks, ForceCommand,
SetEnv, AcceptEnv, PermitUserEnvironment's ~/.ssh/environment), pam_env.conf and
~/.pam_environment, the other PAM modules of /etc/pam.d/sshd, and limits of a socket-
activated sshd (no PidFile: this process's own limits are the start then).
"""

import contextlib
import json
import os
import resource
import shlex
import signal
import subprocess

import loginlimits
from mpicluster_envblock import ASSIGNMENT, unquote
from nodeinfo import read_text

#: sshd's PATH before pam_env's (Debian's and Ubuntu's build).
SSHD_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/games"
#: The files pam_env reads for sshd (Debian's /etc/pam.d/sshd), in order.
PAM_ENV_FILES = ("/etc/environment", "/etc/default/locale")
#: The absolute Python the login's command runs: the login's PATH may be the fault.
PYTHON = "/usr/bin/python3"
MARK = "MPICLUSTER-LOGIN "
#: What the login's command reports: its environment as the shell handed it over (read
#: from /proc: Python's own locale coercion adds LC_CTYPE to os.environ) and its limits.
REPORT = (
    "import json, resource; e = open('/proc/self/environ', 'rb').read().decode('utf-8', "
    "'replace'); print(%r + json.dumps({'env': dict(x.split('=', 1) for x in e.split('\\0') "
    "if '=' in x), 'limits': dict((n, resource.getrlimit(getattr(resource, 'RLIMIT_' + "
    "n.upper()))) for n in ('nofile', 'memlock', 'nproc'))}))" % MARK
)
TIMEOUT = 10


def pam_environment(paths=PAM_ENV_FILES):
    """{name: value} pam_env sets from its files: the last line for a name wins."""
    found = {}
    for path in paths:
        for line in (read_text(path) or "").splitlines():
            match = ASSIGNMENT.match(line)
            if match:
                found[match.group(1)] = unquote(match.group(2))[0]
    return found


def environment(entry, port, pam=None):
    """What sshd hands the user's shell: its own variables, then pam_env's."""
    name = entry.pw_name
    env = {
        "USER": name,
        "LOGNAME": name,
        "HOME": entry.pw_dir,
        "SHELL": entry.pw_shell,
        "MAIL": "/var/mail/" + name,
        "PATH": SSHD_PATH,
        "SSH_CLIENT": "127.0.0.1 0 %d" % port,
        "SSH_CONNECTION": "127.0.0.1 0 127.0.0.1 %d" % port,
    }
    env.update(pam_environment() if pam is None else pam)
    return env


def session_limits(entry):
    """{item: [soft, hard]} pam_limits gives the user's ssh session: limits.conf's lines
    for them over the listening sshd's own limits (this process's where none is found)."""
    pid = loginlimits.sshd_pid()
    start = loginlimits.proc_limits(pid) if pid else None
    if start is None:
        start = loginlimits.limits()
    gids = os.getgrouplist(entry.pw_name, entry.pw_gid)
    who = {
        "user": entry.pw_name,
        "uid": entry.pw_uid,
        "gid": entry.pw_gid,
        "gids": gids,
        "groups": _group_names(gids),
    }
    return loginlimits.pam_limits(who, start)


def _group_names(gids):
    import grp

    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return names


def becoming(entry, limits):
    """The child's first steps (before exec): take the session's limits (root may raise
    them), then become the user when this process is root and another user."""

    def start():
        for item, (soft, hard) in (limits or {}).items():
            which = loginlimits.ITEMS[item]
            # not root: what this process may not raise stays as it is
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, (_rlim(soft), _rlim(hard)))
        if os.geteuid() == 0 and entry.pw_uid != 0:
            os.setgroups(os.getgrouplist(entry.pw_name, entry.pw_gid))
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)

    return start


def _rlim(value):
    return resource.RLIM_INFINITY if value is None else value


def measure(entry, environ, limits=None, timeout=TIMEOUT):
    """{"env", "limits"} a login of `entry` (a pwd entry) ends with: its shell run with
    `environ` (environment()) and `limits` (session_limits()); {"error"} if it did not
    report. One child: the shell, which execs the system's Python to report; in a
    session of its own, so that what a hanging startup file started ends with it."""
    shell = entry.pw_shell or "/bin/sh"
    command = "exec %s -I -S -c %s" % (PYTHON, shlex.quote(REPORT))
    try:
        child = subprocess.Popen(
            [shell, "-c", command],
            env=environ,
            cwd=entry.pw_dir if os.path.isdir(entry.pw_dir) else "/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=becoming(entry, limits),  # the check runs one thread
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": "%s -c could not start: %s" % (shell, exc)}
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": "%s -c did not finish in %g s" % (shell, timeout)}
    return reported(shell, child.returncode, out, err)


def reported(shell, code, out, err):
    """What the login's command printed after its mark, limits in getrlimit's terms."""
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith(MARK):
            found = json.loads(line[len(MARK) :])
            found["limits"] = dict(
                (item, [None if v == resource.RLIM_INFINITY else v for v in pair])
                for item, pair in found["limits"].items()
            )
            return found
    tail = err.decode("utf-8", "replace").strip().splitlines()
    return {"error": "%s -c exited %d: %s" % (shell, code, tail[-1] if tail else "no output")}
