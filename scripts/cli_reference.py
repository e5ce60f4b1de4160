#!/usr/bin/env python3
"""Writes docs/cli.md, the CLI reference, from the built tool's own --help
output, so the page cannot drift from the tool; with --check, fails (exit 1)
when the page differs from what the tool says now (a ctest runs this).

    python3 scripts/cli_reference.py build/progcache docs/cli.md
    python3 scripts/cli_reference.py --check build/progcache docs/cli.md
"""

import subprocess
import sys


def help_of(tool, *words):
    out = subprocess.run([tool, *words, "--help"], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.rstrip() + "\n"


def subcommands(main_help):
    names, inside = [], False
    for line in main_help.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside and line.startswith("  ") and not line.startswith("   "):
            names.append(line.split()[0])
    return names


def page(tool):
    main = help_of(tool)
    parts = ["# progcache command-line reference",
             "",
             "Generated from `progcache --help` and each subcommand's `--help` by",
             "`python3 scripts/cli_reference.py build/progcache docs/cli.md`; the test",
             "`cli_reference_is_current` fails when this page and the tool disagree. `progcache --version`",
             "prints the version and what the build has (its remote tiers, compression, signing).",
             "",
             "ccache's operator flags do what they do in ccache: `-s` is `stats`, `-z` is `stats --zero`,",
             "`-C` is `clear`, `-p` is `config` and `-V` is `--version`, with ccache's long spellings",
             "(`--show-stats`, `--zero-stats`, `--clear`, `--show-config`). Several run in order (`-sz` shows",
             "the statistics, then zeroes them), and the words after the last go to its command",
             "(`-s --json`). `-M SIZE` (`--max-size SIZE`) is `config set max_size SIZE`: it writes the cap",
             "into the root's settings file, which every program using the root reads. A size needs a unit",
             "wherever it is given (`-M`, `PROGCACHE_MAX_SIZE`, a settings file, `prune --max-size`): ccache",
             "reads `-M 5` as 5 GB, progcache refuses it rather than guess; `0` is no cap, and `prune",
             "--max-size 0`, which would remove everything, is refused in favour of `clear`. A yes/no setting",
             "(`PROGCACHE_DISABLE`, `PROGCACHE_READONLY`) must be a word for yes or no in the environment too",
             "(`1`/`0`, `yes`/`no`, `true`/`false`, `on`/`off`, any case); another word is a usage error, never",
             "read as no (`CliTest.ASettingAPersonCouldMisreadIsRefusedWhereverItIsSet`). Other ccache options",
             "are refused with a usage error that names the progcache command doing their job (`-c` is `prune`,",
             "`-o` is `config set`, `-k` is `config`, `--evict-older-than` is `prune --older-than`, `-F` is",
             "`config set max_entries`, `-x` is `stats`), or else says which ones progcache knows. Error",
             "messages are plain sentences that name the file, line, key or option; the exit code tells the",
             "kind of failure.",
             "",
             "Settings files (`progcache.conf`, lines of `name = value`, `#` comments) are described in the",
             "README's \"Configuration\". `config` lists every setting with its source (`environment`,",
             "`FILE:LINE`, `default`); `config set NAME VALUE` and `config unset NAME` rewrite one line of a",
             "file atomically, after checking the value as it will be read (`tests/config_file_test.cpp`,",
             "`CliTest.ConfigSetWritesTheUsersFileAndEveryCommandReadsIt`).",
             "",
             "`verify`, `prune`, `export` and `import` draw a progress line on standard error when it is a",
             "terminal, and nothing otherwise: as wide as the terminal is at each redraw (less one column), with",
             "the amount done of the total (bytes for `verify` and `import`, entries for `export`), the rate and",
             "the time left once they can be estimated, dropped from the right as the terminal narrows; redrawn",
             "at most ten times a second; erased when done, and before any message printed part-way (an entry",
             "left out of an export, an error), which so starts a line of its own (`tests/progress_test.cpp`,",
             "`CliTest.ABundleShowsAProgressBarOnATerminalAndNoneOtherwise` on a 40-column terminal).",
             "",
             "```",
             main.rstrip(),
             "```",
             ""]
    for name in subcommands(main):
        if name == "nvcc":  # its words are nvcc's: `progcache nvcc --help` is nvcc's help
            parts += [f"## progcache {name}", "", "Every word after `nvcc` (or after a path to nvcc) is nvcc's,",
                      "`--help` included: see the summary above and docs/nvcc.md.", ""]
            continue
        parts += [f"## progcache {name}", "", "```", help_of(tool, name).rstrip(), "```", ""]
    return "\n".join(parts)


def main(argv):
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) != 2:
        sys.exit(__doc__)
    tool, path = argv
    text = page(tool)
    if check:
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{path} is not what `{tool} --help` says now: "
                         f"run python3 scripts/cli_reference.py {tool} {path}")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
