#!/usr/bin/env python3
"""Checks the project's commit habit (CONTRIBUTING.md) on every commit made
since the rule was written down: a subject of 72 characters or fewer that
reads `area: what`, a blank line, then a body that says why.

    python3 tests/commit_messages.py [REV-RANGE]

The default range starts at the commit before the rule (history older than
that is kept as it is). A clone without that commit (a shallow one) is
skipped with a note, not failed: it cannot be checked there.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The last commit before the habit was checked; everything after it is.
SINCE = "1b9a200"
SUBJECT = re.compile(r"^[a-z0-9][\w./+-]*( [\w./+-]+){0,2}: \S")


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)


def problems(message):
    lines = message.split("\n")
    subject = lines[0]
    out = []
    if len(subject) > 72:
        out.append(f"the subject has {len(subject)} characters (72 at most)")
    if not SUBJECT.match(subject):
        out.append("the subject does not read `area: what` (a lower-case area of up to three words)")
    if len(lines) < 3 or lines[1].strip() or not any(l.strip() for l in lines[2:]):
        out.append("no body after a blank line (the body says why)")
    return out


def main():
    if len(sys.argv) > 1:
        rev_range = sys.argv[1]
    else:
        if git("cat-file", "-e", SINCE + "^{commit}").returncode != 0:
            print(f"commit_messages: {SINCE} is not in this clone (shallow?): nothing checked")
            return 0
        rev_range = f"{SINCE}..HEAD"
    revs = git("rev-list", "--no-merges", rev_range)
    if revs.returncode != 0:
        print(f"commit_messages: git rev-list {rev_range}: {revs.stderr.strip()}", file=sys.stderr)
        return 1
    bad = 0
    commits = revs.stdout.split()
    for rev in commits:
        message = git("log", "-1", "--format=%B", rev).stdout.rstrip("\n")
        for p in problems(message):
            bad += 1
            print(f"commit_messages: {rev[:10]} \"{message.splitlines()[0]}\": {p}", file=sys.stderr)
    print(f"commit_messages: {len(commits)} commits checked, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
