import json
import os
import subprocess
import threading

import pytest

import progcache
from conftest import requires_nvrtc

SAXPY = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def key(**kw):
    args = dict(code=SAXPY, code_type="c++", options=["-arch=sm_90"], target_type="cubin")
    args.update(kw)
    return progcache.make_program_cache_key(**args)


def test_key_is_a_32_byte_digest_and_spellings_are_canonical():
    k = key()
    assert isinstance(k, bytes) and len(k) == 32
    assert key(options=["-arch", "sm_90"]) == k
    assert key(options=["--gpu-architecture=sm_90"]) == k
    assert key(code_type="C++", target_type="CUBIN") == k
    assert key(options=["-arch=sm_80"]) != k
    assert key(target_type="ptx") != k
    assert key(name_expressions=["saxpy<float>"]) != k
    assert key(name_expressions=["b", "a"]) == key(name_expressions=["a", "b", "a"])
    assert key(name="kernel-a") != key(name="kernel-b")  # __FILE__ and include lookup depend on it
    assert key(extra_digest=b"x") != k and key(extra_digest=b"x") != key(extra_digest=b"y")


def test_key_is_keyword_only():
    with pytest.raises(TypeError):
        progcache.make_program_cache_key(SAXPY, "c++", [], "cubin")


def test_key_refusals_say_what_to_do():
    with pytest.raises(ValueError, match="side effects"):
        key(options=["--create-pch=x.pch"], extra_digest=b"fp")
    with pytest.raises(ValueError):
        key(code_type="ptx", target_type="ltoir")
    with pytest.raises(ValueError, match="directory component"):
        key(name="src/k.cu")
    assert key(name="src/k.cu", extra_digest=b"fp")
    with pytest.raises(TypeError):
        key(options="-arch=sm_90")
    with pytest.raises(TypeError):
        key(extra_digest="not-bytes")


PTX = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k() { ret; }
"""

# cuda.core's make_program_cache_key contract, from its documentation: what it
# accepts and what it refuses, and with which exception. "ok" means a 32-byte
# key. The three rows marked "differs" are deliberate (docs/python.md).
CONTRACT = [
    # (label, keyword arguments over a c++ → cubin default, expected, differs from cuda.core)
    ("code type in any case", dict(code_type="C++", target_type="CUBIN"), "ok", False),
    ("PTX to cubin", dict(code=PTX, code_type="PTX"), "ok", False),
    ("PTX to PTX", dict(code=PTX, code_type="ptx", target_type="ptx"), "ok", False),
    ("PTX to LTO-IR", dict(code=PTX, code_type="ptx", target_type="ltoir"), ValueError, False),
    ("fatbin target", dict(target_type="fatbin"), ValueError, False),
    ("unknown code type", dict(code_type="fortran"), ValueError, False),
    ("NVVM bytes to ptx", dict(code=b"ir", code_type="nvvm", target_type="ptx"), "ok", False),
    ("NVVM str to ltoir", dict(code="ir", code_type="nvvm", target_type="ltoir"), "ok", False),
    ("NVVM to cubin", dict(code=b"ir", code_type="nvvm"), ValueError, False),
    ("bytes code for c++", dict(code=SAXPY.encode()), TypeError, False),
    ("bytes code for PTX", dict(code=PTX.encode(), code_type="ptx"), TypeError, False),
    ("int code", dict(code=1), TypeError, False),
    ("bytes name expression", dict(name_expressions=[b"saxpy<float>"]), "ok", False),
    ("bytearray name expression", dict(name_expressions=[bytearray(b"k")]), TypeError, False),
    ("int name expression", dict(name_expressions=[1]), TypeError, False),
    ("str extra_digest", dict(extra_digest="d"), TypeError, False),
    ("int code type", dict(code_type=1), ValueError, False),
    ("int target type", dict(target_type=1), ValueError, False),
    # Name expressions are NVRTC's: PTX and NVVM keys ignore them, unchecked.
    ("PTX with an int name expression", dict(code=PTX, code_type="ptx", name_expressions=[1]), "ok", False),
    ("NVVM with a bytearray name expression",
     dict(code=b"ir", code_type="nvvm", target_type="ptx", name_expressions=[bytearray(b"k")]), "ok", False),
    ("LTO-IR code", dict(code=b"lto", code_type="ltoir"), "ok", True),
]

# The same rules for cuda.core ProgramOptions fields.
OPTION_CONTRACT = [
    ("plain", "c++", {}, {}, "ok", False),
    ("include_path", "c++", dict(include_path=["/nonexistent-include-dir"]), {}, "ok", True),
    ("include_path with digest", "c++", dict(include_path=["/nonexistent-include-dir"]), dict(extra_digest=b"d"),
     "ok", False),
    ("create_pch", "c++", dict(create_pch="x.pch"), dict(extra_digest=b"d"), ValueError, False),
    ("time", "c++", dict(time="t.txt"), {}, ValueError, False),
    ("fdevice_time_trace", "c++", dict(fdevice_time_trace="t.json"), {}, ValueError, False),
    ("pch", "c++", dict(pch=True), dict(extra_digest=b"d"), ValueError, True),
    ("extra_sources for c++", "c++", dict(extra_sources=[("a", "x")]), {}, ValueError, False),
    ("extra_sources for PTX", "ptx", dict(extra_sources=[("a", "x")]), {}, ValueError, False),
    ("extra_sources for NVVM", "nvvm", dict(extra_sources=[("a", b"x")]), {}, "ok", False),
    ("use_libdevice", "nvvm", dict(use_libdevice=True), {}, ValueError, False),
    ("use_libdevice with digest", "nvvm", dict(use_libdevice=True), dict(extra_digest=b"d"), "ok", False),
    ("name with a directory", "c++", dict(name="src/k.cu"), {}, ValueError, False),
    ("name with a directory, digest", "c++", dict(name="src/k.cu"), dict(extra_digest=b"d"), "ok", False),
    ("PTX name with a directory", "ptx", dict(name="src/k.ptx"), {}, "ok", False),
    ("PTX ignores include_path", "ptx", dict(include_path=["/x"]), {}, "ok", False),
]


def _outcome(fn, kw):
    try:
        k = fn(**kw)
    except (TypeError, ValueError) as e:
        return type(e)
    assert isinstance(k, bytes) and len(k) == 32
    return "ok"


def _cuda_core_key():
    try:
        from cuda.core.utils import make_program_cache_key
        return make_program_cache_key
    except Exception:  # noqa: BLE001 - cuda.core absent or without its bindings
        return None


def _program_options():
    try:
        from cuda.core import ProgramOptions
        return ProgramOptions
    except Exception:  # noqa: BLE001
        pytest.skip("cuda.core is not importable (pip install 'cuda-core[cu13]')")


@pytest.mark.parametrize("label,kw,expected,differs", CONTRACT, ids=[c[0] for c in CONTRACT])
def test_key_accepts_and_refuses_what_cuda_core_does(label, kw, expected, differs):
    ProgramOptions = _program_options()
    args = dict(code=SAXPY, code_type="c++", options=ProgramOptions(arch="sm_80"), target_type="cubin")
    args.update(kw)
    assert _outcome(progcache.make_program_cache_key, args) == expected
    theirs = _cuda_core_key()
    if theirs is not None:
        assert (_outcome(theirs, args) != expected) == differs, f"cuda.core gives {_outcome(theirs, args)}"


def test_name_expressions_do_not_change_keys_where_nvrtc_does_not_compile():
    ProgramOptions = _program_options()
    for code, code_type, target in [(PTX, "ptx", "cubin"), (b"ir", "nvvm", "ptx")]:
        def k(names):
            return progcache.make_program_cache_key(code=code, code_type=code_type, target_type=target,
                                                    options=ProgramOptions(arch="sm_80"), name_expressions=names)
        assert k(()) == k(["a", b"b"]) == k([1, bytearray(b"x")]), code_type
    # For C++ they are the program's: checked, and in the key.
    assert key(name_expressions=["saxpy<float>"]) != key()


# cuda.core's phrases that its users match on in error messages: progcache's
# message carries each (beside its own wording), with cuda.core's exception type.
PHRASES = [
    ("unknown code type", "key", dict(code_type="fortran"), ValueError, "is not a valid SourceCodeType"),
    ("int code type", "key", dict(code_type=3), ValueError, "is not a valid SourceCodeType"),
    ("PTX to LTO-IR", "key", dict(code=PTX, code_type="ptx", target_type="ltoir"), ValueError,
     "not valid for code_type"),
    ("NVVM to cubin", "key", dict(code=b"ir", code_type="nvvm"), ValueError, "not valid for code_type"),
    ("an int stored", "store", 7, TypeError, "bytes-like or ObjectCode"),
    ("a path-backed ObjectCode whose file is gone", "store", "path", FileNotFoundError, "path-backed ObjectCode"),
]


@pytest.mark.parametrize("label,route,arg,error,phrase", PHRASES, ids=[p[0] for p in PHRASES])
def test_error_messages_carry_cuda_cores_phrases(label, route, arg, error, phrase, tmp_path):
    ProgramOptions = _program_options()
    if route == "key":
        args = dict(code=SAXPY, code_type="c++", options=ProgramOptions(arch="sm_80"), target_type="cubin")
        args.update(arg)
        calls = [("progcache", lambda: progcache.make_program_cache_key(**args))]
        theirs = _cuda_core_key()
        if theirs is not None:
            calls.append(("cuda.core", lambda: theirs(**args)))
    else:
        from cuda.core import ObjectCode
        value = ObjectCode.from_cubin(str(tmp_path / "gone.cubin")) if arg == "path" else arg
        caches = [("progcache memory", progcache.InMemoryProgramCache()),
                  ("progcache file", progcache.FileStreamProgramCache(tmp_path / "c"))]
        try:
            from cuda.core.utils import InMemoryProgramCache
            caches.append(("cuda.core", InMemoryProgramCache()))
        except Exception:  # noqa: BLE001 - cuda.core without its caches
            pass
        calls = [(who, lambda c=c: c.__setitem__(b"k" * 32, value)) for who, c in caches]
    for who, call in calls:
        with pytest.raises(error) as e:
            call()
        assert phrase in str(e.value), f"{who}: {e.value}"


@pytest.mark.parametrize("label,code_type,fields,kw,expected,differs", OPTION_CONTRACT,
                         ids=[c[0] for c in OPTION_CONTRACT])
def test_program_options_fields_follow_cuda_core(label, code_type, fields, kw, expected, differs):
    ProgramOptions = _program_options()
    code = {"c++": SAXPY, "ptx": PTX, "nvvm": b"ir"}[code_type]
    target = "ptx" if code_type == "nvvm" else "cubin"
    args = dict(code=code, code_type=code_type, options=ProgramOptions(arch="sm_80", **fields), target_type=target)
    args.update(kw)
    assert _outcome(progcache.make_program_cache_key, args) == expected
    theirs = _cuda_core_key()
    if theirs is not None:
        assert (_outcome(theirs, args) != expected) == differs, f"cuda.core gives {_outcome(theirs, args)}"


def test_key_differs_wherever_the_output_can():
    ProgramOptions = _program_options()

    def k(code=PTX, code_type="ptx", target="cubin", extra_digest=None, **fields):
        return progcache.make_program_cache_key(code=code, code_type=code_type, target_type=target,
                                                options=ProgramOptions(**{"arch": "sm_80", **fields}),
                                                extra_digest=extra_digest)

    base = k()
    # PTX: the fields nvJitLink reads change the key, NVRTC-only ones do not.
    for field, value in [("lineinfo", True), ("debug", True), ("max_register_count", 32), ("ftz", True),
                         ("prec_div", False), ("prec_sqrt", False), ("fma", False), ("ptxas_options", ["-v"]),
                         ("name", "other"), ("arch", "sm_90")]:
        assert k(**{field: value}) != base, field
    assert k(include_path=["/x"]) == base and k(std="c++17") == base
    # NVVM: extra sources in order, libdevice, the options.
    nv = k(code=b"ir", code_type="nvvm", target="ptx")
    ab = k(code=b"ir", code_type="nvvm", target="ptx", extra_sources=[("a", b"1"), ("b", b"2")])
    ba = k(code=b"ir", code_type="nvvm", target="ptx", extra_sources=[("b", b"2"), ("a", b"1")])
    assert len({nv, ab, ba}) == 3
    lib = k(code=b"ir", code_type="nvvm", target="ptx", use_libdevice=True, extra_digest=b"libdevice")
    assert lib != k(code=b"ir", code_type="nvvm", target="ptx", extra_digest=b"libdevice")
    assert k(code="ir", code_type="nvvm", target="ptx") == nv  # str is its UTF-8 bytes


def test_options_object_with_as_bytes():
    class Options:
        def as_bytes(self, backend):
            return [b"-arch=sm_90", b"-std=c++17"]

    assert key(options=Options(), name="program") == key(options=["-arch=sm_90", "-std=c++17"])


def test_key_works_as_a_cache_key(tmp_path):
    c = progcache.InMemoryProgramCache()
    c[key()] = b"cubin"
    assert c[key(options=["-arch", "sm_90"])] == b"cubin"
    # In the file cache a key and its hex spelling (what the CLI prints) are one entry.
    f = progcache.FileStreamProgramCache(tmp_path / "c")
    f[key()] = b"cubin"
    assert f[key().hex()] == b"cubin"


def _cli():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(here, "..", "..", "build", "progcache"))
    if not os.access(path, os.X_OK):
        pytest.skip("the progcache CLI is not built (set PROGCACHE_CLI)")
    return path


@requires_nvrtc
def test_one_program_one_key_through_every_route(tmp_path, monkeypatch):
    """make_program_cache_key, compile() and the CLI give one program one
    key, headers included; an edited header changes it everywhere and the
    result then equals a fresh compile."""
    src_dir = tmp_path / "src"
    inc = src_dir / "inc"
    inc.mkdir(parents=True)
    (inc / "val.h").write_text("#define VAL 1\n")
    code = '#include "val.h"\nextern "C" __global__ void k(int* a) { *a = VAL; }\n'
    (src_dir / "k.cu").write_text(code)
    cli_path = _cli()
    monkeypatch.chdir(src_dir)
    opts = ["-arch=sm_80", "-I", str(inc)]
    cache = progcache.FileStreamProgramCache(tmp_path / "c")

    def by_key():
        return progcache.make_program_cache_key(code=code, code_type="c++", options=opts, target_type="cubin",
                                                name="k.cu")

    first = progcache.compile(code, "c++", "cubin", opts, cache=cache, name="k.cu")
    assert first.key == by_key() and not first.from_cache
    cli = subprocess.run([cli_path, "--dir", str(tmp_path / "c"), "compile", "k.cu", "--arch", "sm_80", "-I", str(inc),
                          "--json", "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    report = json.loads(cli.stdout)
    report = report[0] if isinstance(report, list) else report
    assert report["key"] == first.key.hex()
    assert (tmp_path / "k.cubin").read_bytes() == first.code  # the CLI served Python's entry
    got = subprocess.run([cli_path, "--dir", str(tmp_path / "c"), "get", first.key.hex(), "-o", str(tmp_path / "g")],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "g").read_bytes() == first.code  # the printed key is usable as `progcache get KEY`

    (inc / "val.h").write_text("#define VAL 2\n")
    edited = progcache.compile(code, "c++", "cubin", opts, cache=cache, name="k.cu")
    fresh = progcache.compile(code, "c++", "cubin", opts, cache=None, name="k.cu")
    assert not edited.from_cache and edited.key != first.key and edited.key == by_key()
    assert edited.code == fresh.code != first.code


@requires_nvrtc
def test_bytes_name_expressions_map_back_to_bytes(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    for expected_from_cache in (False, True):
        r = progcache.compile(SAXPY, "c++", "cubin", ["-arch=sm_80"], [b"saxpy<float>"], cache=cache)
        assert r.from_cache == expected_from_cache
        assert r.symbol_mapping == {b"saxpy<float>": "_Z5saxpyIfEvT_PKS0_PS0_i"}


def test_nvvm_is_keyed_but_not_compiled():
    with pytest.raises(ValueError, match="libNVVM"):
        progcache.compile(b"ir", "nvvm", "ptx", ["-arch=compute_80"])


@requires_nvrtc
def test_compile_through_the_cache_keeps_symbols_and_log(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    first = progcache.compile(SAXPY, "c++", "cubin", ["-arch=sm_80"], ["saxpy<float>"], cache=cache)
    assert first.code[:4] == b"\x7fELF" and not first.from_cache
    assert first.symbol_mapping == {"saxpy<float>": "_Z5saxpyIfEvT_PKS0_PS0_i"}
    second = progcache.compile(SAXPY, "c++", "cubin", ["-arch", "sm_80"], ["saxpy<float>"], cache=cache)
    assert second.from_cache
    assert second.code == first.code and second.symbol_mapping == first.symbol_mapping and second.log == first.log
    assert cache[first.key] == first.code  # the raw cubin under its hex key


@requires_nvrtc
def test_what_cannot_be_keyed_compiles_uncached_with_the_cache_on_and_off(tmp_path, monkeypatch):
    """An include named through a macro, outside the include path: no key can
    say what NVRTC read, yet NVRTC compiles it. compile() compiles it too,
    uncached, saying why; with the cache off the same."""
    (tmp_path / "val.h").write_text("#define V 42\n")
    src = '#define HEADER "val.h"\n#include HEADER\n__global__ void k(int* x) { x[0] = V; }\n'
    name = str(tmp_path / "k.cu")
    before = progcache.compile_stats()["uncacheable"]
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    on = progcache.compile(src, options=["-arch=sm_80"], cache=cache, name=name)
    assert on.key is None and not on.from_cache
    assert "macro" in on.uncacheable
    assert on.code[:4] == b"\x7fELF"
    assert len(cache) == 0
    monkeypatch.setenv("PROGCACHE_DISABLE", "1")
    off = progcache.compile(src, options=["-arch=sm_80"], cache=progcache.FileStreamProgramCache(tmp_path / "c"),
                            name=name)
    assert off.code == on.code and off.key is None
    assert progcache.compile_stats()["uncacheable"] == before + 2
    # A key for it cannot be made either: make_program_cache_key says why.
    with pytest.raises(ValueError):
        progcache.make_program_cache_key(code=src, code_type="c++", options=_program_options()(arch="sm_80", name=name),
                                         target_type="cubin")


@requires_nvrtc
def test_explain_says_hit_or_miss_and_names_what_changed(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define V 1\n")
    src = '#include "val.h"\n' + SAXPY
    opts = ["-arch=sm_80", f"-I{inc}"]
    before = progcache.explain(src, "c++", "cubin", opts, ["saxpy<float>"], cache=cache, name="saxpy.cu")
    assert before["outcome"] == "miss" and before["nearest"] is None and before["same_name"] == 0
    first = progcache.compile(src, "c++", "cubin", opts, ["saxpy<float>"], cache=cache, name="saxpy.cu")
    assert before["key"] == first.key
    hit = progcache.explain(src, "c++", "cubin", opts, ["saxpy<float>"], cache=cache, name="saxpy.cu")
    assert hit["outcome"] == "hit" and hit["differences"] == []
    assert json.loads(hit["record"])["name_expressions"] == ["saxpy<float>"]

    (inc / "val.h").write_text("#define V 2\n")
    miss = progcache.explain(src, "c++", "cubin", ["-arch=sm_90", f"-I{inc}"], ["saxpy<float>"], cache=cache,
                             name="saxpy.cu")
    assert miss["outcome"] == "miss" and miss["nearest"] == first.key
    changes = {(d["component"], d["change"], d["subject"]) for d in miss["differences"]}
    assert changes == {("option", "changed", "--gpu-architecture"), ("file", "edited", str(inc / "val.h"))}
    before = progcache.compile_stats()
    again = progcache.compile(src, "c++", "cubin", ["-arch=sm_90", f"-I{inc}"], ["saxpy<float>"], cache=cache,
                              name="saxpy.cu")
    assert not again.from_cache and again.key == miss["key"]
    hit_again = progcache.compile(src, "c++", "cubin", ["-arch=sm_90", f"-I{inc}"], ["saxpy<float>"], cache=cache,
                                  name="saxpy.cu")
    after = progcache.compile_stats()
    assert hit_again.from_cache
    assert after["compiles"] - before["compiles"] == 1 and after["hits"] - before["hits"] == 1
    assert after["bytes_served"] - before["bytes_served"] == len(hit_again.code)
    assert after["compile_p50_ns"] > 0
    with pytest.raises(TypeError, match="disk store"):
        progcache.explain(src, cache=progcache.InMemoryProgramCache())


@requires_nvrtc
def test_compile_error_carries_the_log_and_stores_nothing(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    with pytest.raises(progcache.CompileError) as e:
        progcache.compile("__global__ void k( {", "c++", "cubin", ["-arch=sm_80"], cache=cache)
    assert "error" in e.value.log
    assert e.value.options == ["-arch=sm_80"]
    assert len(cache) == 0


@requires_nvrtc
def test_compile_releases_the_gil_and_threads_share_one_compile(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    src = SAXPY + "// threads\n"
    results, ticks = [], []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    before = progcache.compile_stats()["compiles"]
    t = threading.Thread(target=ticker)
    t.start()
    workers = [threading.Thread(target=lambda: results.append(
        progcache.compile(src, "c++", "cubin", ["-arch=sm_80"], cache=cache))) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    t.join()
    assert len({r.code for r in results}) == 1
    assert progcache.compile_stats()["compiles"] - before == 1  # one compile, shared by the others
    assert len(ticks) > 5  # Python kept running while NVRTC compiled


@requires_nvrtc
def test_compile_to_ptx_and_ltoir():
    ptx = progcache.compile(SAXPY, "c++", "ptx", ["-arch=sm_80"], ["saxpy<double>"])
    assert b".entry" in ptx.code
    lto = progcache.compile(SAXPY, "c++", "ltoir", ["-arch=sm_80"], ["saxpy<double>"])
    assert len(lto.code) > 0
