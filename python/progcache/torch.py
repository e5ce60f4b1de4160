"""progcache for PyTorch: torch.compile's caches in progcache's store, so that a
new process, container or machine starts warm. One variable turns it on::

    PROGCACHE_TORCH=1

or in code, before the first ``torch.compile`` call, ``progcache.torch.enable()``
(the explicit call works where Python processes no ``.pth`` file, such as an
install with ``pip install --target`` and ``PYTHONPATH``). What it does
(docs/torch.md):

- Inductor's caches that outlive a process are read from and written to the
  companion store ``<progcache root>/torch``, one entry per cached object:
  the FX graph cache, the AOTAutograd cache and the autotuning results,
  through torch's own remote-cache interface (``RemoteCache`` with its
  backend replaced by progcache's); each entry is checksummed, counted under
  the root's cap and carried by every tier (memory, disk, Redis, Redis
  Cluster, HTTP).
- Every C++ library Inductor builds (the CPU kernels, its wrapper modules,
  the precompiled header and the instruction-set probes) is one entry too,
  served in place of the g++ run. Its key is the whole command line with
  every path as written, the bytes of every input, the compiler and the
  programs it runs, the libraries linked, the variables g++ reads and, for
  ``-march=native``, the processor; a manifest of every header the compile
  read (by content) and of every place where a header named in any of them
  could be found (present or absent) is checked before a hit is served.
- torch's ``torch_key()`` and Triton's ``triton_key()``, hashes of the
  installed files that every FX graph cache key holds (0.6 s per process
  here), come from memos in the local root, kept under the identity of every
  file and directory they read (progcache/_triton_key.py).
- Triton kernels (GPU) go through ``progcache.triton``'s cache manager,
  which this module names in ``TRITON_CACHE_MANAGER`` when nothing else is
  named there.
- Everything cached here runs when it is loaded (pickled graphs, generated
  Python modules, shared libraries): it is read only under the library's rule
  for host code (trust.h): the user's private store, or stores whose entries
  are signed and verified. A group-shared root or a remote tier without
  signing is not read.
- Only torch releases this module was tested with are changed
  (``TESTED_TORCH``); on any other, one warning and torch.compile keeps its
  own caches. Any failure of the cache is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple, Union

try:
    import torch  # type: ignore[import-not-found, unused-ignore]
except ImportError as _e:  # pragma: no cover - exercised in a subprocess test
    raise ImportError("progcache.torch needs PyTorch (PyPI 'torch'): pip install torch. "
                      f"Importing it failed: {_e}") from None

from . import _core, _integration, _kernel_dirs

# torch releases whose internals (the remote-cache backend hook and
# CppBuilder.build) this module was tested against: (major, minor).
TESTED_TORCH = ((2, 11), (2, 15))

_SCHEMA = "3"
_STORE = _integration.StoreState("torch", compressed=True)
_lock = threading.RLock()  # re-entered where the install's own import of Inductor reaches enable()
_enabled = False
_installing = False
_saved: Dict[str, Any] = {}
_counts = {"probes_served": 0, "cpp_served": 0, "cpp_deferred": 0, "cpp_compiled": 0, "cpp_not_cached": 0, "cpp_stored": 0, "objects_served": 0,
           "objects_missed": 0, "objects_stored": 0}


def _count(name: str) -> None:
    with _lock:
        _counts[name] += 1


def stats() -> Dict[str, Union[int, float, None]]:
    """The store's counters plus this module's: C++ builds served, compiled,
    not cached (a command or an input it cannot key), stored; Inductor
    objects (graphs, AOTAutograd entries, autotuning results) served,
    missed, stored; ``errors``: failures turned into misses."""
    out = _STORE.stats()
    with _lock:
        out.update(_counts)
    return out


def reset() -> None:
    """Forgets the resolved configuration and closes the store (flushing
    remote writes); the next lookup resolves and opens them again."""
    _STORE.reset()


def _torch_version() -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _torch_identity() -> str:
    return f"{torch.__version__} {getattr(torch.version, 'git_version', '')}"


def supported() -> Optional[str]:
    """None when this torch is one progcache.torch was tested with; else why
    not, in words."""
    if _torch_version() in TESTED_TORCH:
        return None
    tested = ", ".join(f"{a}.{b}" for a, b in TESTED_TORCH)
    return (f"torch {torch.__version__} is not a release progcache.torch was tested with ({tested}); "
            "torch.compile keeps its own caches")


# --------------------------------------------------------------- Inductor objects


def _codegen_identity() -> str:
    """What Inductor's generated CPU code depends on that torch's own keys
    leave out (they are local to a machine; progcache's are not): the vector
    instruction set it picks (its width is written into the code), the
    vector length and thread count settings, the thread count itself."""
    from torch._inductor import config  # type: ignore[import-not-found, unused-ignore]
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # type: ignore[import-not-found, unused-ignore]

    return (f"isa={pick_vec_isa()} simdlen={config.cpp.simdlen} threads={config.cpp.threads} "
            f"num_threads={torch.get_num_threads()} ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '')}")


def _isa_picked() -> bool:
    """Whether Inductor picked a vector instruction set in this process: it
    does when it generates C++ for the CPU, and only then. Picking one
    compiles and loads a probe per instruction set (seconds), so a process
    that generates only GPU code must not be made to. True where this torch
    does not say."""
    from torch._inductor import cpu_vec_isa  # type: ignore[import-not-found, unused-ignore]

    info = getattr(getattr(cpu_vec_isa, "valid_vec_isa_list", None), "cache_info", None)
    return info is None or info().currsize > 0


# An object is stored under torch's key. An object made where Inductor
# generated CPU code depends on the instruction set picked; it goes under a
# second key that names it, and the first holds only a mark saying so. A
# lookup reads the first; only a mark makes it pick an instruction set and
# read the second. Objects of GPU-only graphs cost one read and no probe.
def _object_key(key: str) -> bytes:
    return _core.typed_key("torch-object", [("schema", _SCHEMA), ("torch", _torch_identity()), ("key", key)])


def _cpu_object_key(key: str) -> bytes:
    return _core.typed_key("torch-object-cpu", [("schema", _SCHEMA), ("torch", _torch_identity()),
                                                ("codegen", _codegen_identity()), ("key", key)])


def _code_readable() -> bool:
    st = _STORE.get_state()
    ok = st.store is not None and _STORE.code_allowed(st)
    if ok and st is not _digests_kept_for:
        _keep_digests(st)
    return ok


# The store state whose root keeps the headers' digests for every process.
_digests_kept_for: Any = None


def _keep_digests(st: Any) -> None:
    """A private root keeps the SHA-256 of each header the manifests name,
    by its stat identity, for every process (python/src/held_places.cpp):
    a warm start stats its headers instead of reading them. A group-shared
    root does not: another member could write the file. Under
    PROGCACHE_READONLY it is read, not written."""
    global _digests_kept_for
    _digests_kept_for = st
    private = st.sharing == "private" and bool(st.host_code.get("disk"))
    try:
        _core.keep_header_digests(os.path.join(st.root, "header-digests.json") if private else None,
                                  not (st.cfg or {}).get("read_only", False))
    except Exception:
        st.errors += 1


def _read_object(store_key: bytes, key: str) -> Optional[Tuple[dict, Optional[bytes]]]:
    found = _integration.decode(_STORE.get(store_key, host_code=True))
    if found is None:
        return None
    meta, arts = found
    data = dict(arts).get("value")
    if meta.get("key") != key or not (isinstance(data, bytes) or meta.get("codegen") == "cpu"):
        _STORE.get_state().errors += 1
        return None
    return meta, data if isinstance(data, bytes) else None


def get_object(key: str) -> Optional[bytes]:
    """An Inductor object stored under torch's key, or None. Read only where
    host code may come from: a graph is a pickle, and loading it runs it."""
    if not _code_readable():
        return None
    found = _read_object(_object_key(key), key)
    if found is not None and found[0].get("codegen") == "cpu":
        found = _read_object(_cpu_object_key(key), key)
    if found is None or found[1] is None:
        _count("objects_missed")
        return None
    _count("objects_served")
    return found[1]


def put_object(key: str, data: bytes) -> None:
    """Stores an Inductor object (never raises)."""
    if not isinstance(data, bytes) or not _code_readable():
        return
    meta = {"kind": "torch-object", "key": key, "torch": torch.__version__}
    if _isa_picked():
        if not _STORE.put(_cpu_object_key(key), meta, [("value", data)]):
            return
        _STORE.put(_object_key(key), dict(meta, codegen="cpu"), [])
    elif not _STORE.put(_object_key(key), meta, [("value", data)]):
        return
    _count("objects_stored")


def _backend_class():
    from torch._inductor import remote_cache as rc  # type: ignore[import-not-found, unused-ignore]

    class ProgcacheBackend(rc.RemoteCacheBackend):  # type: ignore[misc, unused-ignore]
        """torch's remote-cache backend interface over progcache's store."""

        def _get(self, key: str) -> Optional[bytes]:
            try:
                return get_object(key)
            except Exception:  # a cache failure is a miss
                _STORE.get_state().errors += 1
                return None

        def _put(self, key: str, data: bytes) -> None:
            try:
                put_object(key, data)
            except Exception:
                _STORE.get_state().errors += 1

    return ProgcacheBackend


# Inductor's caches that cross processes, by the class torch creates for each.
_REMOTE_CLASSES = ("RemoteFxGraphCache", "RemoteAOTAutogradCache", "RemoteAutotuneCache")
# (module, setting): the settings that turn each one on.
_SETTINGS = (("torch._inductor.config", "fx_graph_remote_cache"), ("torch._inductor.config", "autotune_remote_cache"),
             ("torch._functorch.config", "enable_remote_autograd_cache"))

# ------------------------------------------------------------------ C++ builds

# Variables g++ reads that decide what it finds or writes.
_GCC_VARIABLES = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
                  "SOURCE_DATE_EPOCH", "PATH", "LD_LIBRARY_PATH", "LD_RUN_PATH", "LDEMULATION", "GNUTARGET")
# Variables under which a build is not cached: they add outputs.
_REFUSING_VARIABLES = ("DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "GCC_COMPARE_DEBUG")
# Options that are flags alone (the whole word decides them).
_FLAG_PREFIXES = ("-O", "-f", "-m", "-W", "-g", "-std=", "-D", "-U", "-pedantic", "-w")
_FLAG_WORDS = {"-shared", "-fPIC", "-c", "-pthread", "-rdynamic", "-s", "-static", "-static-libstdc++",
               "-static-libgcc", "-P", "-pipe"}
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".h", ".hh", ".hpp", ".hxx", ".i", ".ii")


@dataclass
class _Plan:
    key: bytes
    output: str
    cwd: str
    sources: List[Tuple[str, str]]  # (path, sha256) of every input named on the command line
    search: List[str]  # include directories, every kind, in order
    language: bool  # whether anything is preprocessed (a depfile is expected)
    pending: List[str] = field(default_factory=list)  # deferred precompiled headers it names
    blind: bool = False  # keyed without the paths of its input and output (-E -P)
    started_ns: int = 0
    system: List[str] = field(default_factory=list)  # the compiler's own include directories


@dataclass
class _Memo:
    """What one process learns once: compilers' identities and directories,
    and the processor. (File digests by stat identity and places seen empty
    are remembered by _core, which checks manifests: python/src/held_places.cpp.)"""
    compilers: Dict[str, Optional[tuple]] = field(default_factory=dict)
    cpu: Optional[str] = None


_memo = _Memo()
_memo_lock = threading.Lock()


def _digest(path: str) -> Optional[str]:
    """SHA-256 of a regular file's bytes (remembered for the process by its
    stat identity), or None when it is not one."""
    return _core.file_sha256(path)


def _run(argv: List[str]) -> Optional[str]:
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


def _program_identity(path: str) -> Optional[str]:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def _compiler(word: str) -> Optional[tuple]:
    """(identity, include directories, library directories) of the compiler a
    command names, learned once per process: the driver and every program it
    runs (cc1plus, as, ld, collect2, lto-wrapper) by path, size and
    modification time; its system include directories for C++ as ``-v``
    lists them; its library search path. None when any of it cannot be
    learned (the build is then not cached)."""
    with _memo_lock:
        if word in _memo.compilers:
            return _memo.compilers[word]
    found = _learn_compiler(word)
    with _memo_lock:
        _memo.compilers[word] = found
    return found


def _learn_compiler(word: str) -> Optional[tuple]:
    path = shutil.which(word)
    if path is None:
        return None
    idents = [_program_identity(path)]
    for prog in ("cc1plus", "cc1", "as", "ld", "collect2", "lto-wrapper"):
        out = _run([path, f"-print-prog-name={prog}"])
        if out is None:
            return None
        name = out.strip()
        located = name if os.path.isabs(name) else shutil.which(name)
        idents.append(f"{prog}={_program_identity(located) if located else 'absent'}")
    version = _run([path, "--version"])
    verbose = _run([path, "-xc++", "-E", "-v", os.devnull])
    search = _run([path, "-print-search-dirs"])
    if None in idents or version is None or verbose is None or search is None:
        return None
    dirs: List[str] = []
    inside = False
    for line in verbose.splitlines():
        if line.startswith("#include <...> search starts here:") or line.startswith('#include "..." search starts'):
            inside = True
            continue
        if line.startswith("End of search list."):
            break
        if inside and line.startswith(" "):
            dirs.append(line.strip())
    libs: List[str] = []
    for line in search.splitlines():
        if line.startswith("libraries: ="):
            libs = [p for p in line[len("libraries: ="):].split(":") if p]
    # What the driver links without being asked: start files, the C and C++
    # runtimes, OpenMP's.
    for name in _IMPLICIT_LINK_INPUTS:
        found = next((os.path.join(d, name) for d in libs if os.path.exists(os.path.join(d, name))), None)
        idents.append(f"{name}={_program_identity(found) if found else 'absent'}")
    return ("\n".join(str(i) for i in idents) + "\n" + version, dirs, libs)


_IMPLICIT_LINK_INPUTS = ("crt1.o", "crti.o", "crtn.o", "crtbeginS.o", "crtendS.o", "libc.so", "libc_nonshared.a",
                         "libm.so", "libstdc++.so", "libgcc_s.so", "libgcc.a", "libgomp.so", "specs")


def _cpu() -> str:
    """The processor, as -march=native sees it: vendor, family, model,
    stepping and feature flags of the first processor listed."""
    with _memo_lock:
        if _memo.cpu is not None:
            return _memo.cpu
    wanted = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags")
    got: Dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if got:
                        break
                    continue
                name, _, value = line.partition(":")
                name = name.strip()
                if name in wanted and name not in got:
                    got[name] = value.strip()
    except OSError:
        pass
    text = "\n".join(f"{k}={got.get(k, '')}" for k in wanted)
    with _memo_lock:
        _memo.cpu = text
    return text


def _library(name: str, dirs: List[str]) -> Optional[str]:
    for d in dirs:
        for suffix in (".so", ".a"):
            p = os.path.join(d, f"lib{name}{suffix}")
            if os.path.exists(p):
                return _program_identity(p)
    return None


# What makes shlex.split differ from str.split: a quote, a backslash, or white
# space other than the ASCII blanks (str.split splits at any white space).
# Searched for, one character at a time: no backtracking on any line.
_NOT_PLAIN = re.compile(r"['\"\\]|[^\S \t\r\n]")


def _split_command(line: str) -> List[str]:
    """shlex.split(line), without its character-by-character loop for the
    plain command lines torch writes (about 1 ms each, a dozen per warm
    start)."""
    if _NOT_PLAIN.search(line) is None:
        return line.split()
    return shlex.split(line)


def _plan(builder: Any) -> Optional[_Plan]:
    """The key and what the manifest needs for one CppBuilder build; None
    when the build is not cached (said in stats as ``cpp_not_cached``):
    preprocessing only (torch's own check of its precompiled header),
    relative-path builds, an option or input this module cannot key."""
    if getattr(builder, "_use_relative_path", False):
        return None
    if any(os.environ.get(v) for v in _REFUSING_VARIABLES):
        return None
    argv = _split_command(builder.get_command_line())
    if not argv:
        return None
    compiler = _compiler(argv[0])
    if compiler is None:
        return None
    identity, system_dirs, lib_dirs = compiler
    fields: List[Tuple[str, Any]] = [("schema", _SCHEMA), ("torch", _torch_identity()), ("compiler", identity)]
    # Preprocessing alone without line markers (-E -P: torch's check of its
    # precompiled header, run by every process) writes nothing of where its
    # input and output are: keyed without those paths (which torch draws at
    # random), when nothing it reads could spell them (_path_blind).
    preprocess = "-E" in argv and "-P" in argv
    named: List[str] = []  # the input and output paths as written
    output: Optional[str] = None
    sources: List[Tuple[str, str]] = []
    includes: List[str] = []
    isystem: List[str] = []
    link_dirs: List[str] = []
    libraries: List[str] = []
    native = False
    language = False
    pending: List[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a == "-o" and nxt is not None:
            if output is not None:
                return None
            output = nxt
            named.append(nxt)
            i += 2
            continue
        if a in ("-D", "-U", "-x") and nxt is not None:
            i += 2
            continue
        if a == "-include" and nxt is not None:
            d = _digest(nxt)
            if d is None:
                return None
            sources.append((nxt, d))
            gch_path = nxt + ".gch"
            with _memo_lock:
                deferred = _deferred.get(gch_path)
            if os.path.exists(gch_path):
                gch: Optional[str] = _digest(gch_path)
            elif deferred is not None:
                gch = deferred[1]  # served on demand: keyed by the bytes it will have
                pending.append(gch_path)
            else:
                gch = "absent"
            if gch is None:
                return None
            sources.append((gch_path, gch))
            language = True
            i += 2
            continue
        if a in ("-I", "-isystem", "-L") and nxt is not None:
            (includes if a == "-I" else isystem if a == "-isystem" else link_dirs).append(nxt)
            i += 2
            continue
        if a.startswith("-I") and len(a) > 2:
            includes.append(a[2:])
        elif a.startswith("-isystem") and len(a) > 8:
            isystem.append(a[8:])
        elif a.startswith("-L") and len(a) > 2:
            link_dirs.append(a[2:])
        elif a.startswith("-l") and len(a) > 2:
            libraries.append(a[2:])
        elif a in ("-E", "-P") and preprocess:
            pass
        elif a in ("-M", "-MM", "-MD", "-MMD", "-MF", "-MT", "-MQ", "-save-temps", "-nostdinc",
                   "-nostdinc++") or a.startswith(("-B", "--sysroot", "-specs", "-iquote", "-idirafter", "-imacros",
                                                   "-iprefix", "-iwithprefix", "-imultilib", "-fplugin",
                                                   "-fprofile-use", "-fauto-profile", "-fdebug-prefix-map",
                                                   "-ffile-prefix-map", "-fmacro-prefix-map", "-Wp,", "-Wa,",
                                                   "-Xlinker", "-Xassembler", "-Xpreprocessor", "-T", "@",
                                                   "-fuse-ld", "-m32", "-mx32", "-m16", "-wrapper",
                                                   "-print", "-dumpdir", "-dumpbase", "--param")):
            return None  # inputs or outputs this module does not key, or preprocessing alone
        elif a.startswith("-Wl,"):
            if not _safe_linker_options(a[4:].split(",")):
                return None
        elif a in _FLAG_WORDS or a.startswith(_FLAG_PREFIXES):
            if a in ("-march=native", "-mtune=native", "-mcpu=native"):
                native = True
            if a.startswith("-fprofile") or a.startswith("-fsanitize-coverage-allow"):
                return None
        elif a.startswith("-"):
            return None  # an option this module cannot classify
        else:
            d = _digest(a)
            if d is None:
                return None
            sources.append((a, d))
            named.append(a)
            if not a.endswith((".o", ".a", ".so", ".lo")):
                language = True
        i += 1
    if output is None or not sources:
        return None
    for name in libraries:
        ident = _library(name, link_dirs + lib_dirs)
        if ident is None:
            return None
        fields.append(("library", f"{name}={ident}"))
    from torch._inductor.cpp_builder import _BUILD_TEMP_DIR  # type: ignore[import-not-found, unused-ignore]

    cwd = os.path.join(builder._output_dir, f"{builder._name}_{_BUILD_TEMP_DIR}")
    blind = preprocess and len(sources) == 1 and _path_blind(sources[0][0], includes + isystem)
    if preprocess and not blind:
        return None
    if blind:
        fields.append(("argv", "\0".join("<named>" if a in named else a for a in argv)))
        fields.append(("sources", "\n".join(d for _, d in sources)))
    else:
        fields.append(("argv", "\0".join(argv)))
        fields.append(("sources", "\n".join(f"{p} {d}" for p, d in sources)))
        fields.append(("cwd", cwd))
    fields.append(("environment", "\n".join(f"{v}={os.environ.get(v, '')}" for v in _GCC_VARIABLES)))
    if native:
        fields.append(("cpu", _cpu()))
    return _Plan(key=_core.typed_key("torch-cpp", fields), output=output, cwd=cwd, sources=sources,
                 search=includes + isystem + system_dirs + _environment_dir_list(), language=language,
                 pending=pending, blind=blind,
                 system=[d for d in system_dirs if os.path.normpath(d) not in _environment_dirs()])


# What, in a file the preprocessor reads, writes a path or a time into its
# output: a path-blind key needs none of the first in any file read; no
# output is stored when any file read holds one of the second (it would
# differ in a compile now).
_PATH_WORDS = (b"__FILE__", b"__BASE_FILE__", b"__FILE_NAME__")
_TIME_WORDS = (b"__DATE__", b"__TIME__", b"__TIMESTAMP__")


def _path_blind(source: str, dirs: List[str]) -> bool:
    """Whether preprocessing ``source`` (-E -P) could not depend on where it
    is: no quoted include (found beside it) or include through a macro, no
    path macro, absolute include directories only."""
    if not all(os.path.isabs(d) for d in dirs):
        return False
    try:
        with open(source, "rb") as f:
            text = f.read()
    except OSError:
        return False
    if any(w in text for w in _PATH_WORDS):
        return False
    # With no directory to search, the only places are those beside the
    # source (quoted names) and absolute names.
    found = _core.include_places([source], [], False, [])
    return found is not None and not found[0] and not found[1]


# Linker options (-Wl,) that name no file: anything else is not cached.
_LINKER_WORDS = {"--as-needed", "--no-as-needed", "--enable-new-dtags", "--disable-new-dtags", "-O1", "-O2",
                 "--gc-sections", "--no-undefined", "-Bsymbolic", "-Bsymbolic-functions", "--build-id"}
_LINKER_Z = {"now", "lazy", "relro", "norelro", "noexecstack", "origin", "defs", "nodelete", "text"}


def _safe_linker_options(parts: List[str]) -> bool:
    i = 0
    while i < len(parts):
        w = parts[i]
        if w in ("-rpath", "-R") and i + 1 < len(parts):
            i += 2  # a run-time search path: a string in the output, keyed with the command line
            continue
        if w == "-z" and i + 1 < len(parts) and parts[i + 1] in _LINKER_Z:
            i += 2
            continue
        if w not in _LINKER_WORDS:
            return False
        i += 1
    return True


def _probes(files: List[str], search: List[str], blind: bool = False, own: Tuple[str, ...] = (),
            system: Tuple[str, ...] = ()) -> Optional[Dict[str, bool]]:
    """For every include operand of every file read (the library's include
    lexer: #include, #include_next, __has_include, in any branch, with line
    splices and comments as g++ reads them), whether each place it could be
    found exists: the directory of the including file for quoted names, then
    every include directory, and before each the precompiled NAME.gch g++
    would take instead. A file created later where the compiler would look
    first changes one of these. None (nothing stored) where a file uses a
    time macro, an include outside the compiler's own directories
    (``system``) is named through a macro (no place can be recorded for it;
    glibc's and libstdc++'s ``#ifdef __has_include`` reads as one), or a
    precompiled header other than the command's own (``own``) is where g++
    may use it: a valid one it took is in no dependency list."""
    for f in files:
        try:
            with open(f, "rb") as fh:
                text = fh.read()
        except OSError:
            return None
        if any(w in text for w in _TIME_WORDS) or (blind and b"__BASE_FILE__" in text):
            return None
    # g++ includes stdc-predef.h before a translation unit's text, found as
    # <stdc-predef.h> is: one made later in an -I directory is read first.
    found = _core.include_places(files, search, True, ["stdc-predef.h"])
    if found is None:
        return None  # a file gone, or a place g++ cannot look at: its compile fails, nothing to key
    places, computed = found
    if any(not _under_any(c.rpartition(":")[0], system) for c in computed):
        return None
    if any(present and p.endswith(".gch") and p not in own for p, present in places.items()):
        return None
    return places


def _environment_dir_list() -> List[str]:
    """The include directories the environment adds (CPATH and its kin), as
    g++ reads them: g++ lists them among its own only where they exist, and
    one made later is searched."""
    out: List[str] = []
    for v in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
        value = os.environ.get(v)
        if value is not None:
            out.extend(d or "." for d in value.split(":"))
    return out


def _environment_dirs() -> Set[str]:
    """The same, normalised: g++ lists them among its own directories, but
    they are the user's."""
    return {os.path.normpath(d) for d in _environment_dir_list()}


def _under_any(path: str, dirs: Tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(os.path.join(os.path.realpath(d), "")) for d in dirs)


def _manifest_holds(arts: Dict[str, bytes]) -> bool:
    """Whether every header a build read has its bytes and every place where
    an include operand could be found has its presence (the manifest, its
    check and the check's memo: python/src/held_places.cpp). A manifest
    that is missing or damaged does not hold."""
    return _core.manifest_holds(arts.get("manifest"))


def _place(path: str, data: bytes) -> None:
    """Writes a served output where the compiler would have: a temporary file
    beside it, renamed over it; a shared library or executable gets the
    mode the linker gives one."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    mode = (0o777 if data[:4] == b"\x7fELF" and not path.endswith((".o", ".gch")) else 0o666) & ~umask
    _kernel_dirs.write_atomic(d, os.path.basename(path), data, mode)


def _serve(plan: _Plan) -> bool:
    if not _code_readable():
        return False
    found = _integration.decode(_STORE.get(plan.key, host_code=True))
    if found is None:
        return False
    arts = dict(found[1])
    data = arts.get("output")
    if not isinstance(data, bytes) or not data or not _manifest_holds(arts):
        return False
    try:
        _place(plan.output, data)
    except OSError:
        _STORE.get_state().errors += 1
        return False
    return True


# Precompiled headers (g++'s .gch: Inductor's is about 150 MB) are large and
# read only by a compile. Inductor builds its header before any kernel, so on
# a new machine whose kernels are all served, placing the header would cost
# more than the rest of the warm start. A header progcache holds is therefore
# placed only when a compile that names it runs; until then the kernels that
# name it are keyed by the bytes it will have (its SHA-256, kept in a small
# entry of its own beside the header's).
# .gch path -> (its entry's key, its SHA-256, its builder)
_deferred: Dict[str, Tuple[bytes, str, Any]] = {}
# Slack for file times: a file system may stamp a write with a clock that lags
# the one read before a compile by up to a tick.
_CLOCK_SLACK_NS = 50_000_000


def _header_key(plan_key: bytes) -> bytes:
    return _core.typed_key("torch-pch-digest", [("schema", _SCHEMA), ("build", plan_key.hex())])


def _defer(plan: _Plan, builder: Any) -> bool:
    """Whether a precompiled header's build can be left until a compile
    needs it: its small entry is there and its manifest holds (a compile
    that uses a precompiled header lists none of the header's own
    dependencies, so the kernels' manifests do not cover them)."""
    if not plan.output.endswith(".gch") or os.path.exists(plan.output):
        return False
    found = _integration.decode(_STORE.get(_header_key(plan.key), host_code=True))
    if found is None:
        return False
    digest = found[0].get("sha256")
    if not isinstance(digest, str) or not _manifest_holds(dict(found[1])):
        return False
    with _memo_lock:
        _deferred[plan.output] = (plan.key, digest, builder)
    return True


def _header_lock(header: str):
    """torch's own lock for a precompiled header it builds (held while the
    header is written), or None for a header elsewhere."""
    from torch._inductor import codecache  # type: ignore[import-not-found, unused-ignore]
    from torch.utils._filelock import FileLock  # type: ignore[import-not-found, unused-ignore]

    lock_dir = getattr(codecache, "_HEADER_LOCK_DIR", None)
    header_dir = getattr(codecache, "_HEADER_DIR", None)
    if not lock_dir or os.path.dirname(header) != header_dir or not header.endswith(".h"):
        return None
    os.makedirs(lock_dir, exist_ok=True)
    return FileLock(os.path.join(lock_dir, os.path.basename(header)[:-2] + ".lock"),
                    timeout=getattr(codecache, "LOCK_TIMEOUT", 600))


def _place_deferred(paths: List[str], build) -> None:
    """Places the deferred headers a compile names, under torch's lock for
    each; one that cannot be placed from the store (evicted, its manifest
    no longer holding) is built as torch would have built it."""
    for path in paths:
        with _memo_lock:
            entry = _deferred.pop(path, None)
        if entry is None:
            continue
        lock = _header_lock(path[:-4])
        with lock if lock is not None else contextlib.nullcontext():
            if os.path.exists(path):
                continue
            found = _integration.decode(_STORE.get(entry[0], host_code=True))
            arts = dict(found[1]) if found is not None else {}
            data = arts.get("output")
            if isinstance(data, bytes) and data and _manifest_holds(arts):
                try:
                    _place(path, data)
                    continue
                except OSError:
                    _STORE.get_state().errors += 1
            build(entry[2], defer=False)


def _wait_for_headers(sources: List[Tuple[str, str]]) -> None:
    """Waits out another process writing a precompiled header this compile
    reads (torch writes one under its lock, in place)."""
    for p, _ in sources:
        if p.endswith(".gch"):
            lock = _header_lock(p[:-4])
            if lock is not None:
                with lock:
                    pass


def _store(plan: _Plan, depfile: Optional[str]) -> None:
    deps: List[str] = []
    if depfile is not None:
        try:
            with open(depfile, encoding="utf-8", errors="surrogateescape") as f:
                listed = _core.parse_depfile(f.read())
        except OSError:
            listed = None
        if listed is None:
            if plan.language:
                return
        else:
            deps = listed
    elif plan.language:
        return
    source_paths = {p for p, _ in plan.sources}
    records: List[List[Any]] = []
    for p in dict.fromkeys(deps):
        if p in source_paths:
            continue
        p = p if os.path.isabs(p) else os.path.join(plan.cwd, p)
        try:
            st = os.stat(p)
        except OSError:
            return
        # A header written while the compile ran may not be what it read.
        if max(st.st_mtime_ns, st.st_ctime_ns) >= plan.started_ns - _CLOCK_SLACK_NS:
            return
        d = _digest(p)
        if d is None:
            return
        records.append([p, d])
    # The inputs named on the command line were keyed before the compile:
    # unchanged since, or nothing is stored.
    for p, d in plan.sources:
        if (os.path.exists(p) if d == "absent" else _digest(p) != d):
            return
    # g++ runs in plan.cwd: relative names are looked up from there.
    here = [p for p, _ in plan.sources if p.endswith(_SOURCE_SUFFIXES) or os.path.exists(p + ".gch")]
    probes = _probes([p if os.path.isabs(p) else os.path.join(plan.cwd, p) for p in here] + [r[0] for r in records],
                     [d if os.path.isabs(d) else os.path.join(plan.cwd, d) for d in plan.search], plan.blind,
                     tuple(p for p, _ in plan.sources if p.endswith(".gch")), tuple(plan.system)) if plan.language else {}
    if probes is None:
        return
    # A place found holding a file must have held it before the compile
    # began: one created while g++ searched may have been missed by it.
    for p, present in probes.items():
        if present and not _older_than(p, plan.started_ns - _CLOCK_SLACK_NS):
            return
    try:
        with open(plan.output, "rb") as f:
            data = f.read()
    except OSError:
        return
    if not data:
        return
    manifest = _core.encode_manifest(records, [[p, e] for p, e in sorted(probes.items())])
    if manifest is None:
        return
    _core.save_header_digests()
    meta = {"kind": "torch-cpp", "output": os.path.basename(plan.output), "headers": len(records),
            "places": len(probes)}
    if not _STORE.put(plan.key, meta, [("output", data), ("manifest", manifest)]):
        return
    if plan.output.endswith(".gch"):
        meta = dict(meta, kind="torch-pch-digest", sha256=hashlib.sha256(data).hexdigest())
        _STORE.put(_header_key(plan.key), meta, [("manifest", manifest)])
    _count("cpp_stored")


def _older_than(path: str, when_ns: int) -> bool:
    """Whether a file, and the link that may lead to it, were last changed
    before ``when_ns``."""
    try:
        times = [os.lstat(path), os.stat(path)]
    except OSError:
        return False
    return all(max(t.st_mtime_ns, t.st_ctime_ns) < when_ns for t in times)


def _caches_forced_off() -> bool:
    """torch's own switch for every cache (TORCHINDUCTOR_FORCE_DISABLE_CACHES)."""
    from torch._inductor import config  # type: ignore[import-not-found, unused-ignore]

    return bool(getattr(config, "force_disable_caches", False))


def _cached_build(original):
    def build(self, defer: bool = True) -> None:
        plan = None
        try:
            if _code_readable() and not _caches_forced_off():
                plan = _plan(self)
            if plan is not None:
                if defer and _defer(plan, self):
                    _count("cpp_deferred")
                    return None
                if _serve(plan):
                    _count("cpp_served")
                    return None
                if plan.pending:
                    # A compile names a header left for later: place it (or
                    # build it), and key the compile by what is there now.
                    _place_deferred(plan.pending, build)
                    plan = _plan(self)
            if plan is not None:
                _wait_for_headers(plan.sources)
        except Exception:
            _STORE.get_state().errors += 1
            plan = None
        if plan is None:
            _count("cpp_not_cached")
            return original(self)
        depfile = None
        if plan.language:
            try:
                fd, depfile = tempfile.mkstemp(prefix="progcache-torch-", suffix=".d")
                os.close(fd)
            except OSError:
                _count("cpp_not_cached")
                return original(self)
        command = self.get_command_line()
        if depfile is not None:
            self.get_command_line = lambda: f"{command} -MD -MF {shlex.quote(depfile)}"
        plan.started_ns = time.time_ns()
        try:
            try:
                original(self)
            finally:
                if depfile is not None:
                    del self.get_command_line
            _count("cpp_compiled")
            try:
                _store(plan, depfile)
            except Exception:
                _STORE.get_state().errors += 1
        finally:
            if depfile is not None:
                try:
                    os.unlink(depfile)
                except OSError:
                    pass
        return None

    build._progcache = True  # type: ignore[attr-defined]
    return build


# ------------------------------------------------------- instruction-set probes


def _probe_key(output_path: str) -> Optional[bytes]:
    d = _digest(output_path)
    if d is None:
        return None
    return _core.typed_key("torch-isa-probe", [
        ("schema", _SCHEMA), ("torch", _torch_identity()), ("library", d), ("cpu", _cpu()),
        ("python", f"{_program_identity(sys.executable)} {sys.version}"), ("kernel", " ".join(os.uname())),
        ("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", ""))])


def _cached_probe(original):
    """Inductor checks each instruction set it may use by loading a probe
    library in a new Python process (about 0.2 s each, five or six per new
    cache directory). The outcome depends on the library's bytes and the
    machine, both keyed: a success is remembered; a failure is never."""

    def probe(self, output_path: str) -> bool:
        try:
            key = _probe_key(output_path) if _code_readable() else None
            if key is not None:
                found = _integration.decode(_STORE.get(key, host_code=True))
                if found is not None and found[0].get("loaded") is True:
                    _count("probes_served")
                    return True
        except Exception:
            _STORE.get_state().errors += 1
            key = None
        ok = bool(original(self, output_path))
        if ok and key is not None:
            _STORE.put(key, {"kind": "torch-isa-probe", "loaded": True}, [])
        return ok

    probe._progcache = True  # type: ignore[attr-defined]
    return probe


# ------------------------------------------------------- keys of the installs


def _torch_key_memo_key() -> bytes:
    from torch._inductor import codecache  # type: ignore[import-not-found, unused-ignore]

    return _core.typed_key("torch-key-memo", [
        ("schema", _SCHEMA), ("module", os.path.abspath(codecache.__file__)), ("torch", torch.__version__),
        ("python", sys.version), ("executable", sys.executable)])


def _memoised_torch_key(original: Any) -> Any:
    """Inductor's torch_key() (the SHA-256 of every Python module of torch,
    0.2 s per process) answered from a memo kept under a manifest of the
    files and directories it read (progcache/_triton_key.py), by setting it
    into torch's own cache before its first use. torch's ``set`` (with
    which its compile workers receive the value), ``clear`` and ``prefetch``
    go to torch's function; a value torch already holds is kept."""
    from . import _triton_key

    lock = _triton_key.fork_safe_lock(threading.RLock)
    tried: List[bool] = []
    busy = threading.local()

    def torch_key() -> bytes:
        # Other threads wait for the first's answer (not each hashing torch
        # beside it); a call from within the computation goes to torch.
        if not tried and not getattr(busy, "on", False):
            with lock[0]:
                if not tried:
                    busy.on = True
                    try:
                        value = _triton_key.memoised(_torch_key_memo_key(), "torch_key()", original, "torch")
                        with contextlib.suppress(RuntimeError):  # torch holds a value already: its own
                            original.set(value)
                    except Exception:
                        _STORE.get_state().errors += 1
                    finally:
                        busy.on = False
                        tried.append(True)
        return original()

    def set_value(value: bytes) -> None:
        tried.append(True)
        original.set(value)

    def clear() -> None:
        tried.clear()
        original.clear()

    torch_key.set = set_value  # type: ignore[attr-defined]
    torch_key.clear = clear  # type: ignore[attr-defined]
    torch_key.prefetch = original.prefetch  # type: ignore[attr-defined]
    torch_key.__wrapped__ = original  # type: ignore[attr-defined]
    torch_key._progcache_memo = True  # type: ignore[attr-defined]
    return torch_key


def _rebind(name: str, current: Any, replacement: Any) -> None:
    """Replaces a function in every loaded module that holds it by name
    (modules imported later take it from the module it is defined in)."""
    for mod in list(sys.modules.values()):
        # The module's own namespace only: getattr could run a module's lazy
        # __getattr__ and import things.
        namespace = getattr(mod, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is current:
            namespace[name] = replacement


def _install_key_memos() -> None:
    """torch_key() and Triton's triton_key() (0.4 s per process, computed
    for every FX graph cache key, CPU or GPU) from memos: the two hashes of
    installed files a warm start otherwise repeats in every process."""
    from torch._inductor import codecache  # type: ignore[import-not-found, unused-ignore]

    current = getattr(codecache, "torch_key", None)
    if (current is not None and not getattr(current, "_progcache_memo", False)
            and all(callable(getattr(current, a, None)) for a in ("set", "clear", "prefetch"))):
        _saved["torch_key"] = current
        _rebind("torch_key", current, _memoised_torch_key(current))
    try:
        import triton.runtime.cache as tcache  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception:  # no Triton: Inductor computes no triton_key either
        return
    from . import _triton_key

    before = tcache.triton_key
    try:
        _triton_key.install(tcache)
    except Exception:  # Triton computes its key itself: a cost, not a fault of the caches
        _STORE.get_state().errors += 1
        return
    if tcache.triton_key is not before:  # installed here, not by PROGCACHE_TRITON_WARM_START: undone by disable()
        _saved["triton_key"] = (tcache, before)


# ------------------------------------------------------------------ switch


def _install() -> None:
    """Puts progcache under Inductor's caches; the caller holds _lock."""
    import importlib

    from torch._inductor import cpp_builder  # type: ignore[import-not-found, unused-ignore]
    from torch._inductor import remote_cache as rc  # type: ignore[import-not-found, unused-ignore]

    backend = _backend_class()
    for name in _REMOTE_CLASSES:
        cls = getattr(rc, name)
        _saved["backend:" + name] = cls.__dict__.get("backend_override_cls")
        cls.backend_override_cls = backend
    for module, setting in _SETTINGS:
        mod = importlib.import_module(module)
        if getattr(mod, setting) is None:  # torch's default: not set by the user (TORCHINDUCTOR_...)
            _saved[f"setting:{module}:{setting}"] = None
            setattr(mod, setting, True)
    original = cpp_builder.CppBuilder.build
    if not getattr(original, "_progcache", False):
        _saved["build"] = original
        cpp_builder.CppBuilder.build = _cached_build(original)
    from torch._inductor import cpu_vec_isa  # type: ignore[import-not-found, unused-ignore]

    # torch 2.15 loads each instruction-set probe through this method, and
    # skips the load where a marker beside the probe says it succeeded
    # (which a new machine lacks); torch 2.11 loads it inline, in every
    # process, warm or not, so there is nothing to serve.
    probe = getattr(cpu_vec_isa.VecISA, "_probe_load", None)
    if probe is not None and not getattr(probe, "_progcache", False):
        _saved["probe"] = probe
        cpu_vec_isa.VecISA._probe_load = _cached_probe(probe)
    _install_key_memos()
    if not os.environ.get("TRITON_CACHE_MANAGER"):
        _saved["triton_manager"] = True
        os.environ["TRITON_CACHE_MANAGER"] = "progcache.triton:CacheManager"
    # Inductor's compile workers are new processes: the variable turns this
    # module on in them too (through the autoload .pth).
    _saved["variable"] = os.environ.get("PROGCACHE_TORCH")
    os.environ["PROGCACHE_TORCH"] = "1"


def enable() -> bool:
    """Makes torch.compile's caches progcache's. Returns whether it did:
    False (with one warning) when this torch is not one it was tested with or
    the cache cannot be used; False, silently, under PROGCACHE_DISABLE.
    Idempotent. Call it before the first torch.compile; ``PROGCACHE_TORCH=1``
    calls it when Inductor is first imported."""
    global _enabled, _installing
    with _lock:
        if _enabled:
            return True
        if _installing:  # called again from within the install (an import it made)
            return False
        # Enabling now: the watch that would enable on Inductor's import goes
        # (the install imports Inductor's cache module itself).
        for f in [f for f in sys.meta_path if isinstance(f, _Watch)]:
            sys.meta_path.remove(f)
        st = _STORE.get_state()
        if st.disabled or st.store is None:
            return False  # said once by the store when it failed
        why = supported()
        if why is not None:
            _integration.warn_once("torch", "unsupported", why)
            return False
        try:
            _installing = True
            _install()
        except Exception as e:  # an internal moved: torch keeps its caches
            _restore()
            _integration.warn_once("torch", "install", f"torch.compile keeps its own caches ({e})")
            return False
        finally:
            _installing = False
        _enabled = True
        return True


def _restore() -> None:
    from torch._inductor import cpp_builder  # type: ignore[import-not-found, unused-ignore]
    from torch._inductor import remote_cache as rc  # type: ignore[import-not-found, unused-ignore]
    import importlib

    for k, v in list(_saved.items()):
        if k.startswith("backend:"):
            cls = getattr(rc, k[len("backend:"):])
            if v is None:
                if "backend_override_cls" in cls.__dict__:
                    delattr(cls, "backend_override_cls")
            else:
                cls.backend_override_cls = v
        elif k.startswith("setting:"):
            _, module, setting = k.split(":", 2)
            setattr(importlib.import_module(module), setting, v)
        elif k == "build":
            cpp_builder.CppBuilder.build = v
        elif k == "probe":
            from torch._inductor import cpu_vec_isa  # type: ignore[import-not-found, unused-ignore]
            cpu_vec_isa.VecISA._probe_load = v
        elif k == "torch_key":
            from torch._inductor import codecache  # type: ignore[import-not-found, unused-ignore]

            _rebind("torch_key", codecache.torch_key, v)
        elif k == "triton_key":
            tcache, before = v
            _rebind("triton_key", tcache.triton_key, before)
            from . import _triton_key

            _triton_key.uninstall()
        elif k == "triton_manager":
            os.environ.pop("TRITON_CACHE_MANAGER", None)
        elif k == "variable":
            if v is None:
                os.environ.pop("PROGCACHE_TORCH", None)
            else:
                os.environ["PROGCACHE_TORCH"] = v
    _saved.clear()


def disable() -> None:
    """Gives torch.compile its own caches back (and, before Inductor is
    imported, keeps PROGCACHE_TORCH from turning this module on)."""
    global _enabled
    with _lock:
        for f in [f for f in sys.meta_path if isinstance(f, _Watch)]:
            sys.meta_path.remove(f)
        if _enabled:
            _restore()
            _enabled = False


class _Watch:
    """Enables this module when torch's Inductor is first imported (the
    caches live there), so that a process that imports torch and never
    compiles pays nothing for the switch."""

    _module = "torch._inductor.codecache"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._module:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            try:
                enable()
            except Exception as e:  # never fail torch's import
                _integration.warn_once("torch", "install", f"torch.compile keeps its own caches ({e})")

        loader.exec_module = exec_module
        return spec


def _arm() -> None:
    if _Watch._module in sys.modules:
        enable()
    elif not any(isinstance(f, _Watch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch())


if _integration.env_flag("PROGCACHE_TORCH"):
    _arm()
