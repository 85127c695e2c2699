#!/usr/bin/env bash
# Before `make demo` and `make test` create .venv: the Python they use must be 3.11 or
# newer and able to make a virtual environment. Debian and Ubuntu ship venv's ensurepip
# apart, as pythonX.Y-venv (what python3-venv pulls in): as root with apt-get, this
# installs it; otherwise it says in one line what to install, and fails.
#
#     scripts/ensure-python-venv.sh [PYTHON]     # default: python3
set -euo pipefail
python=${1:-python3}

if ! command -v "$python" >/dev/null 2>&1; then
    echo "make: no $python here: install Python 3.11 or newer (Debian/Ubuntu: apt-get install python3)" >&2
    exit 1
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "make: mpicluster needs Python 3.11 or newer, and $python is $version: install one and run make PYTHON=python3.11 (or newer)" >&2
    exit 1
fi
if "$python" -c 'import ensurepip' 2>/dev/null; then
    exit 0
fi
package="python$version-venv"
if [ "$EUID" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "make: $python $version cannot make a virtual environment (no ensurepip): install $package (as root: apt-get install $package) and run make again" >&2
    exit 1
fi
echo "Installing $package with apt-get (venv's ensurepip for $python $version)"
export DEBIAN_FRONTEND=noninteractive
install=(apt-get install -y -qq --no-install-recommends "$package")
"${install[@]}" >/dev/null || { apt-get update -qq && "${install[@]}" >/dev/null; }
if ! "$python" -c 'import ensurepip' 2>/dev/null; then
    echo "make: $package is installed, yet $python $version still has no ensurepip: install Python's venv module for it and run make again" >&2
    exit 1
fi
