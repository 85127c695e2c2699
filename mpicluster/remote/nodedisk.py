"""Free space and writability where the stack lives and where MPI writes: what doctor's
probe (as the MPI user) and the node's own health check (as root, for the MPI user)
measure, for the one disk judge they share (doctor/checks/disk.py)."""

import os

#: Where Open MPI (its session directory), NCCL and the ranks write as the MPI user.
WRITTEN_BY_MPI = ("tmp", "shm", "TMPDIR")


def owner_name(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def writable_as(path, user):
    """Whether `user` may create files in `path`: this process's own access, or (run as
    root for another user) a child that becomes the user and asks (ACLs count)."""
    if user is None or os.geteuid() != 0:
        return os.access(path, os.W_OK | os.X_OK)
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return os.access(path, os.W_OK | os.X_OK)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        try:
            os.setgroups(os.getgrouplist(user, entry.pw_gid))
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            os._exit(0 if os.access(path, os.W_OK | os.X_OK) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def disk(paths, user=None):
    """{label: {path, exists, measured, free, total[, writable, mode, owner]}}: each path
    measured where it is (or, missing, on the nearest folder above it)."""
    found = {}
    for label, path in paths.items():
        probe = path
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe.rstrip("/")) or "/"
            if probe == "/":
                break
        try:
            stat = os.statvfs(probe)
        except OSError as exc:
            found[label] = {"path": path, "error": str(exc)}
            continue
        found[label] = {
            "path": path,
            "exists": probe == path,
            "measured": probe,
            "free": stat.f_bavail * stat.f_frsize,
            "total": stat.f_blocks * stat.f_frsize,
        }
        if label in WRITTEN_BY_MPI and probe == path:
            info = os.stat(path)
            found[label]["writable"] = writable_as(path, user)
            found[label]["mode"] = "%04o" % (info.st_mode & 0o7777)
            found[label]["owner"] = owner_name(info.st_uid)
    return found
