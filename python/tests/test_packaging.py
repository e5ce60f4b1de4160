"""The package as pip installs it: the `progcache` command and `python -m
progcache` come with the wheel, and NVIDIA's NVRTC wheels in the same
environment are found whether or not that environment is activated."""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import progcache
from progcache.__main__ import command_path


def _clean_env(tmp_path, **extra):
    """An environment as a script run with the environment's python, not
    activated: no VIRTUAL_ENV, no CUDA or Python search variables, a PATH
    without the environment's bin/."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                        "PROGCACHE_NVRTC", "PROGCACHE_NVJITLINK", "PROGCACHE_DIR")}
    env["PATH"] = "/usr/bin:/bin"
    env["HOME"] = str(tmp_path / "home")
    env.update(extra)
    return env


def _installed_command():
    path = command_path()
    if path is None:
        pytest.skip("progcache is imported from a source tree here, not installed by pip: no command to test")
    return path


def test_the_wheel_installs_the_command_in_the_environments_bin(tmp_path):
    path = _installed_command()
    assert os.path.samefile(os.path.dirname(path), sysconfig.get_path("scripts")), path
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF", "the command is the executable itself, not a Python wrapper"
    env = _clean_env(tmp_path)
    version = subprocess.run([path, "--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"progcache {progcache.__version__}"), version.stdout


def test_the_version_comes_from_one_place():
    # CMakeLists.txt's project(VERSION) is the wheel's version (pyproject.toml
    # reads it) and the library's (version.h).
    import importlib.metadata

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "CMakeLists.txt")) as f:
        declared = re.search(r"project\(progcache VERSION ([0-9.]+)", f.read()).group(1)
    assert progcache.__version__ == declared
    try:
        assert importlib.metadata.version("progcache") == declared
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("progcache is imported from a source tree here, not installed by pip")


def test_python_m_progcache_runs_the_command(tmp_path):
    _installed_command()
    env = _clean_env(tmp_path)
    m = [sys.executable, "-m", "progcache"]
    version = subprocess.run(m + ["--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"progcache {progcache.__version__}"), version.stdout
    # Exit status and messages are the command's own.
    bogus = subprocess.run(m + ["bogus"], env=env, capture_output=True, text=True)
    assert bogus.returncode == 2 and "unknown subcommand 'bogus'" in bogus.stderr, bogus.stderr
    # A store and a read through it, as a user would.
    src = tmp_path / "v.bin"
    src.write_bytes(b"\x00program bytes\xff")
    cache = str(tmp_path / "cache")
    put = subprocess.run(m + ["--dir", cache, "put", "k", str(src)], env=env, capture_output=True, text=True)
    assert put.returncode == 0, put.stderr
    out = tmp_path / "out.bin"
    got = subprocess.run(m + ["--dir", cache, "get", "k", "-o", str(out)], env=env, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == src.read_bytes()


_COPIED = ("libhiredis", "libzstd", "libcrypto")  # linked, and not in the manylinux policy


def _copied_libraries():
    """The directory of the libraries a repaired wheel carries
    (scripts/wheel.sh), or skip."""
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(progcache.__file__))), "progcache.libs")
    # scripts/test.sh installs the wheel scripts/wheel.sh repaired, and says
    # so: there, a wheel without the libraries is a failure, not a skip.
    assert os.path.isdir(d) or os.environ.get("PROGCACHE_WHEEL_REPAIRED") != "1", \
        f"the installed wheel carries no {d}: not repaired by scripts/wheel.sh"
    if not os.path.isdir(d):
        pytest.skip("progcache is not installed from a repaired wheel here (scripts/wheel.sh; scripts/test.sh "
                    "installs one)")
    return os.path.realpath(d)


def _system_copies():
    """Where the machine's own copies of those libraries are."""
    # ldconfig is in /sbin, which a minimal PATH (env -i) leaves out.
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                if os.path.exists(p)), "ldconfig")
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0].startswith(tuple(f"{b}.so" for b in _COPIED)):
            found.append(path.strip())
    return found


def test_the_wheel_carries_the_libraries_a_machine_may_lack(tmp_path):
    libs = _copied_libraries()
    names = os.listdir(libs)
    for base in _COPIED:
        assert any(n.startswith(base + "-") for n in names), names
    env = _clean_env(tmp_path)
    # What the extension maps once imported: the wheel's copies.
    maps = subprocess.run([sys.executable, "-c", "import progcache; print(open('/proc/self/maps').read())"],
                          env=env, capture_output=True, text=True)
    assert maps.returncode == 0, maps.stderr
    for base in _COPIED:
        mapped = {line.split()[-1] for line in maps.stdout.splitlines() if f"/{base}" in line}
        assert mapped and all(os.path.dirname(os.path.realpath(m)) == libs for m in mapped), (base, mapped)
    # The command, the executable itself, resolves them to the same copies.
    command = _installed_command()
    ldd = subprocess.run(["ldd", command], capture_output=True, text=True)
    for base in _COPIED:
        line = next((x for x in ldd.stdout.splitlines() if x.strip().startswith(base)), "")
        path = line.partition("=> ")[2].split(" (")[0]
        assert path and os.path.dirname(os.path.realpath(path)) == libs, (base, ldd.stdout)


def test_the_commands_run_time_paths_stay_inside_the_install(tmp_path):
    # Every directory the command searches for its libraries is under the
    # prefix it was installed in (bin/..): none where another user could put
    # a library of that name.
    _copied_libraries()
    command = _installed_command()
    out = subprocess.run(["readelf", "-d", command], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("no readelf here")
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.*)\]", out.stdout)
    assert paths, out.stdout
    for entry in paths[0].split(":"):
        assert entry.startswith("$ORIGIN/../"), entry
        resolved = os.path.normpath(os.path.join(os.path.dirname(command), entry[len("$ORIGIN/"):]))
        prefix = os.path.dirname(os.path.dirname(command))
        assert os.path.commonpath([resolved, prefix]) == prefix, (entry, resolved, prefix)


def test_the_wheel_works_where_the_machine_has_none_of_those_libraries(tmp_path):
    # The machine's copies hidden in a private mount namespace (each bound
    # over by an empty file), as on a machine that never had them: importing
    # progcache, storing and reading through it, and the command all work.
    _copied_libraries()
    hidden = _system_copies()
    if not hidden:
        pytest.skip("this machine has none of the libraries to hide")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here (unshare -m: {probe.stderr.strip()})")
    command = _installed_command()
    cache = str(tmp_path / "cache")
    (tmp_path / "in").write_bytes(b"\x00bytes\xff")
    script = " && ".join(
        [f"mount --bind /dev/null {p}" for p in hidden] +
        [f"{sys.executable} -c 'import progcache; c = progcache.InMemoryProgramCache(); print(\"imported\")'",
         f"{command} --dir {cache} put k {tmp_path}/in", f"{command} --dir {cache} get k -o {tmp_path}/out",
         # The hiding holds: the machine's own copy no longer loads.
         f"! {sys.executable} -c 'import ctypes; ctypes.CDLL(\"{hidden[0]}\")' 2>/dev/null",
         "echo hidden-ok"])
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], env=_clean_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "imported" in r.stdout and "hidden-ok" in r.stdout, (r.stdout, r.stderr)
    assert (tmp_path / "out").read_bytes() == (tmp_path / "in").read_bytes()


def test_a_target_install_runs_the_command_and_python_m(tmp_path):
    # pip install --target DIR with PYTHONPATH=DIR, as on a machine whose
    # environment cannot be changed: `python -m progcache` finds the command
    # (the wheel's file list names it from another directory there), and the
    # command finds the wheel's own copies of its libraries.
    wheel = os.environ.get("PROGCACHE_WHEEL", "")
    if not os.path.isfile(wheel):
        pytest.skip("PROGCACHE_WHEEL names no wheel here (scripts/test.sh sets it to the one it built)")
    target = tmp_path / "target"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                          "--no-index", "--target", str(target), wheel], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr
    env = _clean_env(tmp_path, PYTHONPATH=str(target))
    m = [sys.executable, "-S", "-m", "progcache"]
    version = subprocess.run(m + ["--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"progcache {progcache.__version__}"), version.stdout
    (tmp_path / "in").write_bytes(b"\x00bytes\xff")
    cache = str(tmp_path / "cache")
    for args in (["put", "k", str(tmp_path / "in")], ["get", "k", "-o", str(tmp_path / "out")]):
        r = subprocess.run(m + ["--dir", cache, *args], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "out").read_bytes() == (tmp_path / "in").read_bytes()
    libs = target / "progcache.libs"
    if libs.is_dir():
        ldd = subprocess.run(["ldd", str(target / "bin" / "progcache")], capture_output=True, text=True)
        for base in _COPIED:
            line = next((x for x in ldd.stdout.splitlines() if x.strip().startswith(base)), "")
            path = line.partition("=> ")[2].split(" (")[0]
            assert path and os.path.dirname(os.path.realpath(path)) == os.path.realpath(libs), (base, ldd.stdout)


def _nvrtc_wheel():
    """The NVRTC library of an NVIDIA wheel in this environment, or None."""
    for p in sys.path:
        for sub in ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"):
            f = os.path.join(p, sub)
            if p and os.path.isfile(f):
                return os.path.realpath(f)
    return None


def _search_paths(env):
    code = "import json, progcache._core as c; print(json.dumps(c.library_search_paths('nvrtc')))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [os.path.realpath(p) if os.path.exists(p) else p for p in json.loads(r.stdout)]


def test_nvidia_wheels_are_found_whether_or_not_the_environment_is_activated(tmp_path):
    wheel = _nvrtc_wheel()
    if wheel is None:
        pytest.skip("no NVIDIA NVRTC wheel in this environment (pip install 'cuda-core[cu13]' brings one)")
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment")
    activated = _search_paths(_clean_env(tmp_path, VIRTUAL_ENV=sys.prefix))
    not_activated = _search_paths(_clean_env(tmp_path))
    assert wheel in activated
    assert wheel in not_activated, "the environment's own NVRTC wheel is not searched when it is not activated"
    # And the library found there compiles through progcache.
    r = subprocess.run([sys.executable, "-c",
                        "import progcache; p = progcache.compile('extern \"C\" __global__ void k() {}', "
                        "options=['-arch=sm_90']); print(len(p.code))"],
                       env=_clean_env(tmp_path, PROGCACHE_NVRTC=wheel), capture_output=True, text=True)
    assert r.returncode == 0 and int(r.stdout) > 0, r.stderr


def _package_dir(tmp_path):
    """The directory of the progcache package that a script run with this
    python imports (from another directory, no PYTHONPATH: the installed one)."""
    r = subprocess.run([sys.executable, "-c", "import os, progcache; print(os.path.dirname(progcache.__file__))"],
                       cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_type_stubs_match_the_public_api(tmp_path):
    """mypy's stubtest over the installed package with the allowlist shipped
    in it: every public name, its signature and its kind as the stubs say
    (the allowlist names what stubtest cannot check, and why)."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install mypy)")
    allowlist = os.path.join(_package_dir(tmp_path), "stubtest-allowlist.txt")
    assert os.path.isfile(allowlist), "the stubtest allowlist is not shipped in the package"
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "progcache", "--allowlist", allowlist],
                       cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stdout + r.stderr


def _shape(fn: ast.FunctionDef):
    """What a call can rely on: how many arguments are positional-only (their
    names are not), the names of the others, which have defaults, and *args
    and **kwargs."""
    a = fn.args
    positional = a.posonlyargs + a.args
    with_default = {p.arg for p in positional[len(positional) - len(a.defaults):]} if a.defaults else set()
    with_default |= {p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return {"positional_only": len(a.posonlyargs),
            "named": [p.arg for p in a.args],
            "keyword_only": [p.arg for p in a.kwonlyargs],
            "defaults": sorted(n for n in with_default if n not in {p.arg for p in a.posonlyargs}),
            "positional_only_defaults": len([p for p in a.posonlyargs if p.arg in with_default]),
            "varargs": a.vararg is not None,
            "kwargs": a.kwarg is not None}


def _runtime_shapes(obj):
    """The shapes of nanobind's own signatures of `obj` (one per overload)."""
    shapes = []
    for sig in getattr(obj, "__nb_signature__", ()):
        text = re.sub(r"\\\d+", "...", sig[0])  # defaults are placeholders (\0, \1, ...)
        fn = ast.parse(text + ": ...").body[0]
        assert isinstance(fn, ast.FunctionDef), text
        shapes.append(_shape(fn))
    return shapes


def test_core_stubs_match_the_bindings_signatures():
    """stubtest cannot read a nanobind function's signature (its module-level
    functions are allowlisted, its methods passed over): the stub of each is
    compared here with the signature nanobind records (__nb_signature__):
    which arguments are positional-only, the names of the others, defaults."""
    from progcache import _core
    stub_path = os.path.join(os.path.dirname(_core.__file__), "_core.pyi")
    with open(stub_path) as f:
        stub = ast.parse(f.read())
    checked = 0
    problems = []

    def compare(name, fn, runtime):
        nonlocal checked
        shapes = _runtime_shapes(runtime)
        if not shapes:
            return  # not a nanobind function (a property, a class without a constructor)
        checked += 1
        if _shape(fn) not in shapes:
            problems.append(f"{name}: stub {_shape(fn)}, runtime {shapes}")

    for node in stub.body:
        if isinstance(node, ast.FunctionDef):
            compare(node.name, node, getattr(_core, node.name))
        elif isinstance(node, ast.ClassDef) and hasattr(_core, node.name):
            cls = getattr(_core, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in vars(cls):
                    compare(f"{node.name}.{item.name}", item, vars(cls)[item.name])
    assert not problems, "\n".join(problems)
    assert checked >= 30, f"only {checked} signatures compared"


def _glibc_versions_and_needs(path):
    """The GLIBC_x.y symbol versions an ELF file asks for, and its NEEDED
    libraries, as binutils' objdump reads them."""
    dyn = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(p) for p in m.split(".")) for m in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", dyn)}
    heads = subprocess.run(["objdump", "-p", path], capture_output=True, text=True, check=True).stdout
    return versions, set(re.findall(r"NEEDED\s+(\S+)", heads))


def test_the_manylinux_wheel_asks_for_nothing_newer_than_glibc_2_28(tmp_path):
    """The wheel scripts/wheel-manylinux.sh makes (named by
    PROGCACHE_MANYLINUX_WHEEL): tagged manylinux_2_28, and every ELF file in it
    (the extension, the command) asks for no C library symbol newer than
    glibc 2.28 and needs no library but the C library's own: what lets it
    install on RHEL 8 and the distributions of its age. Installing and
    running it on an older C library is scripts/wheel-manylinux-test.sh."""
    import shutil
    import zipfile

    wheel = os.environ.get("PROGCACHE_MANYLINUX_WHEEL", "")
    if not os.path.isfile(wheel):
        pytest.skip("PROGCACHE_MANYLINUX_WHEEL names no wheel (bash scripts/wheel-manylinux.sh makes one)")
    if shutil.which("objdump") is None or shutil.which("nm") is None:
        pytest.skip("objdump and nm (binutils) are not installed")
    assert os.path.basename(wheel).endswith("-manylinux_2_28_x86_64.whl"), wheel
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    allowed = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
    elves = []
    for dirpath, _, files in os.walk(tmp_path):
        for f in files:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    elves.append(path)
    assert any(p.endswith(".so") for p in elves) and any(os.sep + "scripts" + os.sep in p for p in elves), elves
    for path in elves:
        versions, needs = _glibc_versions_and_needs(path)
        name = os.path.relpath(path, tmp_path)
        assert versions and max(versions) <= (2, 28), f"{name} asks for GLIBC_{'.'.join(map(str, max(versions)))}"
        assert needs <= allowed, f"{name} needs {sorted(needs - allowed)}"
        if path.endswith(".so"):
            # Its static OpenSSL, zstd, hiredis and libc++ stay its own: a
            # symbol exported would be bound to by other modules of the process.
            exported = {line.split()[-1] for line in
                        subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                                       check=True).stdout.splitlines() if line.strip()}
            assert exported == {"PyInit__core"}, f"{name} exports {len(exported)} symbols: {sorted(exported)[:8]}"
