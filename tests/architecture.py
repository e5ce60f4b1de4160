#!/usr/bin/env python3
"""docs/architecture.md kept true (ctest `architecture`).

Three checks, each naming what fails:

- layers: a file of src/ includes only headers of its own layer and of the
  layers below it, in the order the page's layer diagram gives (top first);
  a public header include/progcache/X.h is of the layer whose directory
  holds X.cpp (one with no X.cpp, such as version.h, is util's);
- names: every file of src/, tools/, python/src/ and python/progcache/ is
  named in the page, by its path, or (where no other directory holds a
  file of that name) by its name or the name of its pair (places.h with
  places.cpp);
- sizes: no file of src/, tools/, include/ or python/ is over 800 lines,
  but those listed below, which may not grow past the size they had when
  the check was written.

    python3 tests/architecture.py [REPO_ROOT]
"""

import os
import re
import sys

MAX_LINES = 800
# Files over MAX_LINES when the check was written, and their size then:
# each may shrink, none may grow (cutting them into rooms is owed).
LONGER = {
    "src/config/config.cpp": 809,
    "python/src/core.cpp": 1016,
    "python/progcache/torch.py": 1262,
}
SOURCE_SUFFIXES = (".cpp", ".h", ".inc", ".py", ".pyi")


def files_under(root, top):
    out = []
    for d, dirs, names in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for n in sorted(names):
            out.append(os.path.relpath(os.path.join(d, n), root))
    return out


def layer_order(doc):
    """The layers the diagram lists under src/, bottom first."""
    block = doc.split("```", 2)[1]
    order = []
    for line in block.splitlines():
        m = re.match(r"^(\w[\w ]*?)\s{2,}src/(\w+)\b", line)
        if m:
            order.append(m.group(2))
    return list(reversed(order))


def check_layers(root, doc):
    order = layer_order(doc)
    problems = []
    if not order:
        return ["docs/architecture.md: no layer diagram (a line 'NAME  src/DIR ...' in its first code block)"]
    src_dirs = sorted(d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d)))
    for d in src_dirs:
        if d not in order:
            problems.append(f"src/{d}/: not a layer of the diagram in docs/architecture.md")
    public = {}
    for name in os.listdir(os.path.join(root, "include", "progcache")):
        stem = name.split(".")[0]
        home = [f for f in files_under(root, "src") if os.path.basename(f) == stem + ".cpp"]
        public[stem] = home[0].split("/")[1] if home else "util"
    for f in files_under(root, "src"):
        if not f.endswith(SOURCE_SUFFIXES):
            continue
        layer = f.split("/")[1]
        if layer not in order:
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = m.group(1)
            top = target.split("/")[0]
            if top == "progcache":
                of = public.get(os.path.basename(target).split(".")[0], "util")
            elif top in order:
                of = top
            else:
                continue
            if order.index(of) > order.index(layer):
                problems.append(f"{f}:{n}: includes {target}, of the layer {of}, above {layer}")
    return problems


def stem_of(name):
    return re.sub(r"\.(h|cpp|inc|py|pyi)$", "", name)


def check_names(root, doc):
    files = []
    for top in ("src", "tools", os.path.join("python", "src"), os.path.join("python", "progcache")):
        files += [f for f in files_under(root, top) if not f.endswith("py.typed")]
    dirs_of = {}
    for f in files:
        dirs_of.setdefault(stem_of(os.path.basename(f)), set()).add(os.path.dirname(f))
    problems = []
    for f in files:
        d, stem = os.path.dirname(f), stem_of(os.path.basename(f))
        pair = [x for x in files if os.path.dirname(x) == d and stem_of(os.path.basename(x)) == stem]
        if any(x in doc for x in pair):
            continue
        if len(dirs_of[stem]) == 1 and any(
                re.search(r"(?<![\w.-])" + re.escape(os.path.basename(x)) + r"(?![\w-])", doc) for x in pair):
            continue
        problems.append(f"{f}: not named in docs/architecture.md (say where it stands and what it does)")
    return problems


def check_sizes(root):
    problems = []
    for top in ("src", "tools", "include", "python"):
        for f in files_under(root, top):
            if not f.endswith(SOURCE_SUFFIXES):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                n = sum(1 for _ in fh)
            cap = LONGER.get(f, MAX_LINES)
            if n > cap:
                why = "its size when the check was written" if f in LONGER else "cut it into rooms"
                problems.append(f"{f}: {n} lines, over {cap} ({why})")
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as fh:
        doc = fh.read()
    problems = check_layers(root, doc) + check_names(root, doc) + check_sizes(root)
    for p in problems:
        print(f"architecture: {p}", file=sys.stderr)
    if problems:
        return 1
    print("architecture: every file named, every include points down, no file over its size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
