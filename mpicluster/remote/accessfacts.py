"""What decides, on a node, whether a login or a launch works: read, never changed.

A helper of doctor's probe (stdlib only, any Python 3.6+). Each function reads what a
cause would leave behind, so that doctor names the cause it saw on the node, not the
usual suspect:
- login(): the modes and owners sshd's StrictModes judges, and the sshd settings that
  refuse keys or users (with the file and line that set them);
- trust(): the cluster key, its line in authorized_keys, mpicluster's ssh blocks;
- listening(): whether anything listens on the ssh port (the node's own check);
- known_host_keys(): the keys the managed known_hosts block holds, by host;
- setters(): the startup files that set a variable for non-interactive logins;
- resolver(): /etc/nsswitch.conf's hosts line and the /etc/hosts lines naming a host;
- mca_files(): Open MPI's parameter files and what they set.
"""

import glob
import os
import re

from nodeinfo import read_text

#: sshd keywords that can refuse a key login, and those whose values accumulate.
SSHD_KEYWORDS = (
    "strictmodes",
    "pubkeyauthentication",
    "authorizedkeysfile",
    "allowusers",
    "denyusers",
    "allowgroups",
    "denygroups",
    "maxstartups",
)
SSHD_LISTS = ("allowusers", "denyusers", "allowgroups", "denygroups")
SSHD_CONFIG = "/etc/ssh/sshd_config"
#: Files a non-interactive ssh login's shell or PAM reads (bash: ~/.bashrc via sshd).
STARTUP_FILES = (
    "/etc/environment",
    "~/.pam_environment",
    "~/.ssh/environment",
    "/etc/bash.bashrc",
    "~/.bashrc",
    "/etc/profile",
    "/etc/profile.d/*.sh",
    "~/.profile",
    "~/.bash_profile",
    "~/.bash_login",
    "~/.zshenv",
    "/etc/zsh/zshenv",
)
MCA_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_")


def stat_of(path):
    try:
        info = os.stat(path)
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}
    return {
        "path": path,
        "mode": "%04o" % (info.st_mode & 0o7777),
        "uid": info.st_uid,
        "owner": owner_name(info.st_uid),
    }


def owner_name(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def groups():
    try:
        import grp

        return sorted(set(grp.getgrgid(g).gr_name for g in os.getgroups()))
    except (ImportError, KeyError, OSError):
        return []


def sshd_settings():
    """{keyword: [(value, "file:line"), ...]} from sshd_config and its Includes, up to
    the first Match block (what applies to every login); "match": whether one exists."""
    found = {}
    state = {"match": False, "unreadable": []}
    read_sshd_config(SSHD_CONFIG, 0, found, state)
    return {"settings": found, "match": state["match"], "unreadable": state["unreadable"]}


def read_sshd_config(path, depth, found, state):
    """Add one sshd config file's settings to found, following its Includes (4 deep),
    and stop at the first Match block (state["match"] then says so)."""
    text = read_text(path)
    if text is None:
        state["unreadable"].append(path)
        return
    for number, raw in enumerate(text.splitlines(), 1):
        keyword, value = sshd_line(raw)
        if not keyword:
            continue
        if keyword == "match":
            state["match"] = True
            return
        if keyword == "include" and depth < 4:
            for included in sshd_included(value):
                read_sshd_config(included, depth + 1, found, state)
                if state["match"]:
                    return
            continue
        if keyword in SSHD_KEYWORDS:
            keep_sshd_setting(found, keyword, value, "%s:%d" % (path, number))


def sshd_line(raw):
    """(keyword in lower case, value) of one sshd_config line; ("", "") for a blank or
    comment line."""
    line = raw.split("#", 1)[0].strip()
    if not line:
        return "", ""
    parts = line.replace("=", " ", 1).split(None, 1)
    return parts[0].lower(), parts[1].strip() if len(parts) > 1 else ""


def sshd_included(value):
    """The files an Include line names, in order (relative patterns are under /etc/ssh)."""
    for pattern in value.split():
        if not pattern.startswith("/"):
            pattern = "/etc/ssh/" + pattern
        for included in sorted(glob.glob(pattern)):
            yield included


def keep_sshd_setting(found, keyword, value, where):
    """The first value of a keyword wins; the allow/deny lists add up."""
    entries = found.setdefault(keyword, [])
    if keyword in SSHD_LISTS or not entries:
        entries.append([value, where])


def login(cluster, user=None):
    """What sshd on this node judges before it accepts the cluster key for this user
    (or, read by root, for `user`)."""
    if user is None:
        name, uid, home, names = owner_name(os.getuid()), os.getuid(), home_of(None), groups()
    else:
        import pwd

        entry = pwd.getpwnam(user)
        name, uid, home = entry.pw_name, entry.pw_uid, entry.pw_dir
        names = groups_of(name, entry.pw_gid)
    ssh_dir = home + "/.ssh"
    return {
        "user": name,
        "uid": uid,
        "groups": names,
        "paths": [stat_of(home), stat_of(ssh_dir), stat_of(ssh_dir + "/authorized_keys")],
        "key": stat_of(ssh_dir + "/mpicluster_" + cluster),
        "sshd": sshd_settings(),
    }


def home_of(home):
    return home if home is not None else os.path.expanduser("~")


def groups_of(name, gid):
    """The names of `name`'s groups (its primary group `gid` and the others)."""
    try:
        import grp

        return sorted(set(grp.getgrgid(g).gr_name for g in os.getgrouplist(name, gid)))
    except (ImportError, KeyError, OSError):
        return []


def trust(cluster, home=None):
    """The cluster's ssh trust in `home` (this user's by default): the cluster key, its
    line in authorized_keys (and that line's from= list), mpicluster's blocks. key and
    authorized are None where the files cannot be read (root on a home that squashes
    root), False where they are not there."""
    home = home_of(home)
    marker = " mpicluster:" + cluster
    authorized = readable(home + "/.ssh/authorized_keys")
    lines = (authorized or "").splitlines()
    line = next((x for x in lines if x.rstrip().endswith(marker)), None)
    source = re.match(r'from="([^"]*)"', line) if line else None
    key = stat_of(home + "/.ssh/mpicluster_" + cluster)
    return {
        "home": home,
        "key_fp": key_fingerprint(read_text(home + "/.ssh/mpicluster_" + cluster + ".pub")),
        "authorized_fp": key_fingerprint(line),
        "key": "mode" in key if key.get("error") in (None, MISSING) else None,
        "config_block": "# BEGIN mpicluster " + cluster + "\n"
        in (read_text(home + "/.ssh/config") or ""),
        "known_hosts_block": "# BEGIN mpicluster " + cluster + " host keys"
        in (read_text("/etc/ssh/ssh_known_hosts") or ""),
        "authorized": None if authorized is False else line is not None,
        "authorized_from": source.group(1).split(",") if source else None,
    }


MISSING = os.strerror(2)  # ENOENT's words, as stat_of reports them


def readable(path):
    """The text of `path`; "" when it is not there; False when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""
    except OSError:
        return False


def listening(port):
    """{"port", "listening"}: whether a TCP socket listens on `port` here (IPv4 or IPv6,
    any address), from the kernel's tables; listening None where none can be read."""
    found = None
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        text = read_text(path)
        if text is None:
            continue
        found = found or False
        for line in text.splitlines()[1:]:
            fields = line.split()
            # local address "ADDR:PORT" in hex; state 0A is LISTEN
            if len(fields) > 3 and fields[3] == "0A" and fields[1].endswith(":%04X" % port):
                return {"port": port, "listening": True}
    return {"port": port, "listening": found}


def startup_paths(home=None):
    home = home_of(home)
    paths = []
    for pattern in STARTUP_FILES:
        pattern = pattern.replace("~", home, 1)
        matches = sorted(glob.glob(pattern)) if "*" in pattern else [pattern]
        paths.extend(matches)
    return paths


def setters(variables, home=None):
    """{variable: ["file:line: text", ...]}: startup lines that assign it (in this user's
    files, or those of the user whose home is `home`)."""
    found = {}
    if not variables:
        return found
    patterns = dict(
        (name, re.compile(r"(^|[\s;])(export\s+)?" + re.escape(name) + r"\s*="))
        for name in variables
    )
    for path in startup_paths(home):
        text = read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("#"):
                continue
            for name, pattern in patterns.items():
                if pattern.search(stripped):
                    found.setdefault(name, []).append("%s:%d: %s" % (path, number, stripped[:160]))
    return found


def mca_variables(environ):
    return sorted(k for k in environ if k.startswith(MCA_PREFIXES))


def resolver(names):
    """nsswitch's hosts line, and for each name the /etc/hosts lines that name it."""
    hosts_line = None
    for line in (read_text("/etc/nsswitch.conf") or "").splitlines():
        stripped = line.split("#", 1)[0].strip()
        if stripped.startswith("hosts:"):
            hosts_line = stripped
    lines = {}
    for number, line in enumerate((read_text("/etc/hosts") or "").splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        for name in names:
            if name in fields[1:]:
                lines.setdefault(name, []).append([number, " ".join(fields)])
    return {"nsswitch_hosts": hosts_line, "hosts_lines": lines}


def mca_files(mpi_prefix):
    """{path: [[key, value, line], ...]} of Open MPI's (and PRRTE's) parameter files."""
    home = os.path.expanduser("~")
    candidates = [
        mpi_prefix + "/etc/openmpi-mca-params.conf",
        mpi_prefix + "/etc/prte-mca-params.conf",
        mpi_prefix + "/etc/pmix-mca-params.conf",
        "/etc/openmpi/openmpi-mca-params.conf",
        home + "/.openmpi/mca-params.conf",
        home + "/.prte/mca-params.conf",
    ]
    found = {}
    for path in candidates:
        if path in found:
            continue
        text = read_text(path)
        if text is None:
            continue
        settings = []
        for number, line in enumerate(text.splitlines(), 1):
            stripped = line.split("#", 1)[0].strip()
            key, sep, value = stripped.partition("=")
            if sep and key.strip():
                settings.append([key.strip(), value.strip(), number])
        found[path] = settings
    return found


#: Commands that write to a login's output when a startup file runs them.
PRINTERS = re.compile(r"(^|[\s;&|(])(echo|printf|cat|figlet|fortune|neofetch)(\s|$)")


def printing_lines():
    """Startup-file lines that print: a login that prints before its command breaks
    rsync, scp/sftp and doctor's own probe. ["file:line: text", ...]"""
    home = os.path.expanduser("~")
    found = []
    for path in [*startup_paths(), home + "/.ssh/rc", "/etc/ssh/sshrc"]:
        text = read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("#") or not PRINTERS.search(stripped):
                continue
            found.append("%s:%d: %s" % (path, number, stripped[:160]))
    return found[:40]


CLIENT_KEYWORDS = ("host", "match", "user", "port", "hostname", "identityfile", "proxyjump")


def ssh_client_lines():
    """The ssh client settings the MPI user's logins to peers depend on, where they are
    set: ["file:line: text", ...] of ~/.ssh/config and the system's ssh_config."""
    home = os.path.expanduser("~")
    paths = [home + "/.ssh/config", "/etc/ssh/ssh_config"]
    paths += sorted(glob.glob("/etc/ssh/ssh_config.d/*.conf"))
    found = []
    for path in paths:
        for number, line in enumerate((read_text(path) or "").splitlines(), 1):
            stripped = line.split("#", 1)[0].strip()
            keyword = stripped.replace("=", " ", 1).split(None, 1)[0].lower() if stripped else ""
            if keyword in CLIENT_KEYWORDS or keyword == "proxycommand":
                found.append("%s:%d: %s" % (path, number, stripped[:160]))
    return found[:200]


def host_key_fingerprints():
    """SHA256 fingerprints of this node's own host keys (the .pub files are public)."""
    found = [
        key_fingerprint(read_text(p)) for p in sorted(glob.glob("/etc/ssh/ssh_host_*_key.pub"))
    ]
    return [fingerprint for fingerprint in found if fingerprint]


def key_fingerprint(line):
    """SHA256 fingerprint of the public key in an authorized_keys / known_hosts / .pub
    line (options and names before it, a comment after it), or None."""
    import base64
    import hashlib

    for field in (line or "").split():
        if not field.startswith("AAAA"):
            continue
        try:
            blob = base64.b64decode(field)
        except ValueError:
            return None
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return None


def known_host_keys(cluster, path="/etc/ssh/ssh_known_hosts"):
    """{host name or address: [fingerprints]} of the managed block of `path`."""
    text = read_text(path) or ""
    begin = "# BEGIN mpicluster " + cluster + " host keys"
    inside = False
    found = {}
    for line in text.splitlines():
        if line.startswith(begin):
            inside = True
            continue
        if inside and line.startswith("# END mpicluster"):
            break
        if inside and line.strip() and not line.startswith("#"):
            fingerprint = key_fingerprint(line)
            for name in line.split()[0].split(","):
                name = re.sub(r"^\[([^]]+)\]:\d+$", r"\1", name)
                if fingerprint and fingerprint not in found.setdefault(name, []):
                    found[name].append(fingerprint)
    return found
