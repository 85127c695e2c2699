#!/bin/bash
# Start, restart or stop munge's and Slurm's daemons on this node, the same way with or
# without systemd (detected here: /run/systemd/system exists when systemd runs).
#
#   slurm_daemons.sh ensure DAEMON[:CONFIG,...]...   start a daemon that is not running,
#                                                    restart one older than a CONFIG
#   slurm_daemons.sh stop DAEMON...
#
# DAEMON is munged, slurmctld or slurmd. Without systemd each daemon detaches itself (as
# the distribution's init scripts started them) and outlives the session that started
# it. Prints one line per daemon it started, restarted or stopped: nothing means nothing
# changed.
set -euo pipefail

action=$1
shift
systemd=false
if [ -d /run/systemd/system ]; then
    systemd=true
fi

unit_of() {
    if [ "$1" = munged ]; then echo munge; else echo "$1"; fi
}

# The daemon's main process, or nothing.
pid_of() {
    local pid
    if $systemd; then
        pid=$(systemctl show -p MainPID --value "$(unit_of "$1")")
        if [ "$pid" != 0 ]; then echo "$pid"; fi
    else
        pgrep -o -x "$1" || true
    fi
}

# True when a configuration file changed at or after the process started.
older_than_config() {
    local pid=$1 file started
    shift
    started=$(( $(date +%s) - $(ps -o etimes= -p "$pid") ))
    for file in "$@"; do
        if [ -e "$file" ] && [ "$(stat -c %Y "$file")" -ge "$started" ]; then
            return 0
        fi
    done
    return 1
}

start() {
    if $systemd; then
        systemctl enable -q "$(unit_of "$1")"
        systemctl restart "$(unit_of "$1")"
        return
    fi
    case $1 in
        munged)
            install -d -o munge -g munge -m 0755 /run/munge
            runuser -u munge -- /usr/sbin/munged
            ;;
        slurmctld | slurmd)
            /usr/sbin/"$1"
            ;;
        *)
            echo "unknown daemon $1" >&2
            exit 2
            ;;
    esac
}

stop() {
    local name=$1 pid=$2
    if $systemd; then
        systemctl stop "$(unit_of "$name")"
        return
    fi
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

for spec in "$@"; do
    name=${spec%%:*}
    files=()
    if [ "$spec" != "$name" ]; then
        IFS=, read -r -a files <<< "${spec#*:}"
    fi
    pid=$(pid_of "$name")
    case $action in
        ensure)
            if [ -z "$pid" ]; then
                start "$name"
                echo "started $name"
            elif [ ${#files[@]} -gt 0 ] && older_than_config "$pid" "${files[@]}"; then
                stop "$name" "$pid"
                start "$name"
                echo "restarted $name"
            elif $systemd && ! systemctl is-enabled -q "$(unit_of "$name")"; then
                systemctl enable -q "$(unit_of "$name")"
                echo "enabled $name"
            fi
            ;;
        stop)
            if [ -n "$pid" ]; then
                stop "$name" "$pid"
                echo "stopped $name"
            fi
            # slurmctld's prerm cancels the jobs (scancel) when its pid file is there,
            # and fails without a slurmctld to ask: the package would not purge
            rm -f "/run/$name.pid"
            if $systemd && systemctl is-enabled -q "$(unit_of "$name")" 2>/dev/null; then
                systemctl disable -q "$(unit_of "$name")"
            fi
            ;;
        *)
            echo "usage: $0 ensure|stop DAEMON[:CONFIG,...]..." >&2
            exit 2
            ;;
    esac
done
