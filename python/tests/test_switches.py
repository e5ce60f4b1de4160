"""The switches that act through progcache-autoload.pth (PROGCACHE_TRITON_WARM_START,
PROGCACHE_TILELANG, PROGCACHE_TORCH), where Python does not run that file:
progcache found through PYTHONPATH (as after ``pip install --target``) by a
Python started with -S, so that no directory is a site directory. Tried as a
new user on a machine whose environment cannot be changed would."""

import os
import shutil
import subprocess
import sys

import pytest

import progcache

HERE = os.path.dirname(os.path.abspath(__file__))
AUTOLOAD = os.path.join(HERE, "..", "autoload")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """progcache as ``pip install --target`` lays it out: the package, the
    autoload module and its .pth side by side in a directory that is not a
    site directory."""
    d = tmp_path_factory.mktemp("target")
    package = os.path.dirname(os.path.abspath(progcache.__file__))
    shutil.copytree(package, d / "progcache", ignore=shutil.ignore_patterns("__pycache__"))
    # A repaired wheel's copied libraries (scripts/wheel.sh) sit beside the package.
    libs = os.path.join(os.path.dirname(package), "progcache.libs")
    if os.path.isdir(libs):
        shutil.copytree(libs, d / "progcache.libs")
    for f in ("_progcache_autoload.py", "progcache-autoload.pth"):
        shutil.copy(os.path.join(AUTOLOAD, f), d / f)
    return str(d)


def run(code, target, extra_path=(), **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "PYTHON"))}
    e["PYTHONPATH"] = os.pathsep.join([target, *extra_path])
    e.update(env)
    p = subprocess.run([sys.executable, "-S", "-W", "always::RuntimeWarning", "-c", code], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def triton_dir():
    """The directory holding the real Triton, to be found through PYTHONPATH
    like progcache (its site directory is not run as one under -S)."""
    triton = pytest.importorskip("triton", reason="triton is not installed")
    return os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__)))


def said(p):
    return [line for line in p.stderr.splitlines() if "progcache-autoload.pth" in line]


def test_a_switch_python_never_saw_is_said_once_with_the_call_to_make(target, triton_dir):
    # The switch turns progcache on for the framework here only because this
    # process imported progcache: said once, with the call that works in
    # every process, and only for the switch that acted.
    p = run("import progcache, importlib, triton; importlib.reload(progcache); import triton.compiler", target,
            [triton_dir], PROGCACHE_TRITON_WARM_START="1", PROGCACHE_TILELANG="1")
    lines = said(p)
    assert len(lines) == 1, p.stderr
    assert "PROGCACHE_TRITON_WARM_START" in lines[0] and "progcache.triton.enable(warm_start=True)" in lines[0]
    assert "PROGCACHE_TILELANG" not in lines[0]
    # The framework imported first: the same one warning when progcache arrives.
    p = run("import triton, progcache", target, [triton_dir], PROGCACHE_TRITON_WARM_START="1")
    assert len(said(p)) == 1, p.stderr


def test_a_switch_is_not_said_where_the_program_does_what_it_would(target, triton_dir):
    # The program imports progcache's module for the framework itself (the
    # documented call's route; Inductor's workers unpickling progcache.torch):
    # nothing to tell it.
    p = run("import progcache.triton as t, triton; t.enable(warm_start=True)", target, [triton_dir],
            PROGCACHE_TRITON_WARM_START="1")
    assert said(p) == [], p.stderr
    # No framework imported at all (the command through Python, a script that
    # only reads statistics): nothing to tell either.
    p = run("import progcache", target, [triton_dir], PROGCACHE_TRITON_WARM_START="1", PROGCACHE_TILELANG="1",
            PROGCACHE_TORCH="1")
    assert said(p) == [], p.stderr
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "PYTHON"))}
    p = subprocess.run([sys.executable, "-S", "-W", "always::RuntimeWarning", "-m", "progcache", "--version"],
                       env={**e, "PYTHONPATH": target, "PROGCACHE_TORCH": "1"}, capture_output=True, text=True,
                       timeout=120)
    assert said(p) == [], p.stderr


def test_a_switch_under_w_error_never_fails_the_import(target, triton_dir):
    for code in ("import progcache, triton; print('ok')", "import triton, progcache; print('ok')"):
        p = subprocess.run([sys.executable, "-S", "-W", "error", "-c", code],
                           env={**{k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "PYTHON"))},
                                "PYTHONPATH": os.pathsep.join([target, triton_dir]),
                                "PROGCACHE_TRITON_WARM_START": "1"},
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr


def test_no_switch_no_word(target):
    p = run("import progcache", target)
    assert "progcache-autoload.pth" not in p.stderr, p.stderr


def test_a_switch_in_a_site_directory_is_not_warned_about():
    # The installed package, its .pth in a site directory: Python ran the
    # hook, and importing progcache says nothing.
    if not progcache._hook_installed():
        pytest.skip("progcache is not installed in a site directory here (scripts/test.sh installs the wheel)")
    e = {k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_")}
    e["PROGCACHE_TILELANG"] = "1"
    p = subprocess.run([sys.executable, "-W", "always::RuntimeWarning", "-c",
                        "import sys, progcache; print('_progcache_autoload' in sys.modules)"],
                       env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True" and "progcache-autoload.pth" not in p.stderr, (p.stdout, p.stderr)


def test_the_switch_acts_when_progcache_is_imported_first_and_the_call_acts_always(target, triton_dir):
    # Triton stands for every watched framework.
    site_dir = triton_dir
    check = "import sys; print('progcache.triton' in sys.modules, 'triton' in sys.modules)"
    # The framework alone: the switch cannot act (said in docs/python.md).
    p = run("import triton; " + check, target, [site_dir], PROGCACHE_TRITON_WARM_START="1")
    assert p.stdout.split() == ["False", "True"], p.stderr
    # progcache imported first: it arms the hook, which loads progcache.triton
    # when triton is imported.
    p = run("import progcache, triton; " + check, target, [site_dir], PROGCACHE_TRITON_WARM_START="1")
    assert p.stdout.split() == ["True", "True"], p.stderr
    assert "PROGCACHE_TRITON_WARM_START" in p.stderr and "progcache.triton.enable(warm_start=True)" in p.stderr
    # Imported after the framework: it acts at once.
    p = run("import triton, progcache; " + check, target, [site_dir], PROGCACHE_TRITON_WARM_START="1")
    assert p.stdout.split() == ["True", "True"], p.stderr
    # The documented call, without the variable: triton_key() is memoised.
    p = run("import triton, progcache.triton as t; t.enable(warm_start=True); "
            "from triton.runtime import cache; print(getattr(cache.triton_key, '_progcache_memo', False))",
            target, [site_dir])
    assert p.stdout.strip() == "True", (p.stdout, p.stderr)
    # And the switch's own effect once armed: the same memo.
    p = run("import progcache, triton; from triton.runtime import cache; "
            "print(getattr(cache.triton_key, '_progcache_memo', False))", target, [site_dir],
            PROGCACHE_TRITON_WARM_START="1")
    assert p.stdout.strip() == "True", (p.stdout, p.stderr)
