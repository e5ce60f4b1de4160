#!/usr/bin/env python3
"""Runs every shell and Python block of the README and docs/*.md as a newcomer
would after the README's two commands, and fails when one fails.

A block is a fenced code block whose language is sh, bash or python. It runs
from a directory that mirrors the repository's root (each top-level entry a
link to the checkout's, so `examples/kernels/saxpy.cu` and `build/progcache`
resolve, while what the block writes stays in the mirror), with HOME a fresh
directory (so ~/.cache/progcache is the block's own), and with the Python
given by --python first on PATH (`python` is the environment progcache was
installed into). Shell blocks run under `bash -e -o pipefail`, Python blocks
from a file of their own.

A block that cannot run here says so in an HTML comment on the line before it
(a blank line between is allowed):

    <!-- snippet: skip <why> -->       never run here (a GPU, a server not started,
                                        an install the two commands already did)
    <!-- snippet: needs <package> -->  run only with --with <package> (torch,
                                        tilelang: their own environments and commands)

usage: doc_snippets.py --python PY [--with PACKAGE] [--only PACKAGE] [--list] [FILES...]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*snippet:\s*(skip|needs)\s+(.*?)\s*-->\s*$")
LANGUAGES = {"sh": "sh", "bash": "sh", "python": "python"}


class Block:
    def __init__(self, path, line, language, text, mark):
        self.path, self.line, self.language, self.text, self.mark = path, line, language, text, mark

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"


def blocks_of(path):
    """The shell and Python blocks of a Markdown file, each with the marker
    on the line before it (or None)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        language = m.group(1)
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if language not in LANGUAGES:
            continue
        mark = None
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0:
            mm = MARK.match(lines[j].strip())
            if mm:
                mark = (mm.group(1), mm.group(2))
        out.append(Block(path, start + 1, LANGUAGES[language], "\n".join(body) + "\n", mark))
    return out


def mirror(into):
    """A directory whose top-level entries link to the checkout's."""
    for name in os.listdir(ROOT):
        if name in (".git",):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(into, name))


def run(block, python, timeout):
    with tempfile.TemporaryDirectory(prefix="progcache-snippet-") as tmp:
        work = os.path.join(tmp, "repo")
        home = os.path.join(tmp, "home")
        os.mkdir(work)
        os.mkdir(home, 0o700)
        mirror(work)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PROGCACHE_", "TRITON_", "TORCHINDUCTOR_", "XDG_"))}
        env["HOME"] = home
        env["PATH"] = os.path.dirname(os.path.abspath(python)) + os.pathsep + env.get("PATH", "")
        if block.language == "sh":
            cmd = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        else:
            # From a file, as a newcomer pastes it: tilelang reads a kernel's
            # source back (inspect), which `python -c` has not.
            script = os.path.join(tmp, "snippet.py")
            with open(script, "w", encoding="utf-8") as f:
                f.write(block.text)
            cmd = [python, script]
        before = set(os.listdir(work))
        try:
            p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            return 124, text(e.stdout), f"{text(e.stderr)}\n(killed after {timeout:.0f} s)"
        # What a newcomer's checkout would hold after the block that git does
        # not ignore (the block runs in a mirror of it: its top level is new).
        def ignored(n):
            name = n + "/" if os.path.isdir(os.path.join(work, n)) else n
            return subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", name]).returncode == 0
        left = [n for n in sorted(set(os.listdir(work)) - before) if not ignored(n)]
        if p.returncode == 0 and left:
            return 1, p.stdout, p.stderr + f"\nthe block leaves in the checkout what git does not ignore: {left}"
        return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the Python progcache is installed in")
    ap.add_argument("--with", dest="with_", action="append", default=[], help="also run blocks that need PACKAGE")
    ap.add_argument("--only", action="append", default=[], help="run only blocks that need PACKAGE")
    ap.add_argument("--list", action="store_true", help="list the blocks and what would be done, run nothing")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    ran = failed = skipped = 0
    for path in files:
        for b in blocks_of(path):
            needs = b.mark[1] if b.mark and b.mark[0] == "needs" else None
            if args.only and needs not in args.only:
                continue
            if b.mark and b.mark[0] == "skip":
                print(f"skip {b.where()}: {b.mark[1]}")
                skipped += 1
                continue
            if needs and needs not in args.with_ + args.only:
                print(f"skip {b.where()}: needs {needs} (run with --with {needs})")
                skipped += 1
                continue
            if args.list:
                print(f"run  {b.where()} ({b.language})")
                continue
            code, out, err = run(b, args.python, args.timeout)
            ran += 1
            if code == 0:
                print(f"ok   {b.where()} ({b.language})")
            else:
                failed += 1
                print(f"FAIL {b.where()} ({b.language}): exit {code}\n--- block\n{b.text}--- stdout\n{out}"
                      f"--- stderr\n{err}---")
    print(f"doc_snippets: {ran} run, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
