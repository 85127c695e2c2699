"""`up --dry-run`'s probe: how the files `up` writes are on this node now, read only.

Usage: python3 - TEXT_FILE PATH...  Prints one JSON object: "text" holds TEXT_FILE's
text (None when it does not exist), "files" each PATH's sha256 and mode (None when it
does not exist; an "error" where it cannot be read). Nothing is written anywhere.
"""

import hashlib
import json
import os
import sys


def state(path):
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        return {"sha256": digest, "mode": "%04o" % (os.stat(path).st_mode & 0o7777)}
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}


def text_of(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None


def main(argv):
    found = {"text": text_of(argv[0]), "files": {path: state(path) for path in argv[1:]}}
    sys.stdout.write(json.dumps(found) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
