"""``python -m progcache ARGS...``: the ``progcache`` command the wheel
installs, run with ARGS (the same executable, found through the wheel's own
file list, so it works whether or not the environment's bin/ is on PATH)."""
from __future__ import annotations

import os
import sys
from importlib import metadata
from typing import Optional


def command_path() -> Optional[str]:
    """The installed ``progcache`` executable, or None (a source checkout
    imported without installing: there is no command)."""
    try:
        files = metadata.files("progcache") or []
        dist = metadata.distribution("progcache")
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "progcache" and f.parent.name == "bin":
            path = os.path.abspath(str(dist.locate_file(f)))
            if os.access(path, os.X_OK):
                return path
            # pip install --target DIR puts the command in DIR/bin while the
            # file list still names it from the scheme's own library
            # directory (../../bin/progcache): look beside the package.
            path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "progcache")
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def main() -> None:
    path = command_path()
    if path is None:
        sys.exit("progcache: the progcache command is not installed with this package (install it with pip, or "
                 "build it with scripts/build.sh)")
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
