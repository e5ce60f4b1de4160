// progcache._core: the C++ core under the Python module. The Python layer
// (python/progcache/*.py) gives it the cuda.core, pyptx and tilelang shapes;
// this file only moves bytes across the boundary, releasing the GIL around
// disk, network and compiler work.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>
#include <sys/stat.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "compile/cuda_libs.h"
#include "progcache/compile.h"
#include "progcache/config.h"
#include "progcache/explain.h"
#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "progcache/key.h"
#include "progcache/lock_file.h"
#include "progcache/memory_store.h"
#include "progcache/remote_store.h"
#include "progcache/tiered_store.h"
#include "progcache/trust.h"
#include "progcache/version.h"
#include "store/store_meters.h"
#include "util/latency.h"
#include "util/lru.h"
#include "util/single_flight.h"

namespace nb = nanobind;
namespace pc = progcache;

namespace {

// A status's message, in the user's words: the code's name
// ("failed_precondition") chose the exception's type and is not repeated.
std::string words(const pc::Status& st) {
  if (!st.message().empty()) return st.message();
  std::string w(pc::code_name(st.code()));
  std::replace(w.begin(), w.end(), '_', ' ');
  return w;
}

// Status → Python exception: invalid input → ValueError, the rest → OSError
// subclasses or RuntimeError, with progcache's message.
[[noreturn]] void raise(const pc::Status& st) {
  switch (st.code()) {
    case pc::Code::invalid_argument:
      throw nb::value_error(words(st).c_str());
    case pc::Code::permission_denied: {
      PyErr_SetString(PyExc_PermissionError, words(st).c_str());
      throw nb::python_error();
    }
    case pc::Code::not_found: {
      PyErr_SetString(PyExc_FileNotFoundError, words(st).c_str());
      throw nb::python_error();
    }
    case pc::Code::deadline_exceeded: {
      PyErr_SetString(PyExc_TimeoutError, words(st).c_str());
      throw nb::python_error();
    }
    case pc::Code::resource_exhausted:
    case pc::Code::unavailable:
    case pc::Code::data_loss: {
      PyErr_SetString(PyExc_OSError, words(st).c_str());
      throw nb::python_error();
    }
    default:
      throw std::runtime_error(words(st));
  }
}

template <typename T>
T unwrap(pc::Result<T>&& r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

void check(const pc::Status& st) {
  if (!st.ok()) raise(st);
}

// The bytes of a bytes-like object, without copying (requires the GIL or a
// live reference for the duration).
std::string_view view_of(const nb::bytes& b) {
  return {b.c_str(), b.size()};
}

nb::bytes to_bytes(const pc::Bytes& b) {
  return nb::bytes(b.data(), b.size());
}

// ---------------------------------------------------------------- memory

// The in-memory cache: an LRU keyed by the caller's key bytes that holds the
// Python value object itself, so a hit returns that very object (no copy, no
// hashing of the key beyond the map's). Capped by the sum of value sizes.
// StoreStats as Python's stats() dicts give it: every field of
// store_stat_fields(), and the hit rate.
nb::dict stats_dict(const pc::StoreStats& s) {
  nb::dict out;
  for (const auto& f : pc::store_stat_fields()) out[f.name] = s.*f.member;
  // No lookups yet: no rate (None), as `progcache stats --json` says (null).
  if (s.hits + s.misses == 0) {
    out["hit_rate"] = nb::none();
  } else {
    out["hit_rate"] = pc::hit_rate(s);
  }
  return out;
}

class MemoryCache {
 public:
  explicit MemoryCache(std::optional<std::uint64_t> cap) : m_cap(cap) {}

  nb::object get(const nb::bytes& key) {
    pc::SampledTimer timer(pc::sample_this_call<k_memory_cache_get>());
    std::lock_guard l(m_mu);
    nb::object* v = m_lru.find(view_of(key));
    if (v == nullptr) {
      ++m_stats.misses;
      timer.finish(m_get_time);
      return nb::none();
    }
    ++m_stats.hits;
    m_stats.bytes_read += static_cast<std::uint64_t>(PyBytes_GET_SIZE(v->ptr()));
    timer.finish(m_get_time);
    return *v;
  }

  void put(const nb::bytes& key, nb::bytes value) {
    pc::SampledTimer timer(pc::sample_this_call<k_memory_cache_put>());
    const std::uint64_t size = value.size();
    std::lock_guard l(m_mu);
    ++m_stats.puts;
    m_stats.bytes_written += size;
    m_stats.evictions += m_lru.put(std::string(view_of(key)), std::move(value), size, {m_cap, std::nullopt}).evicted;
    timer.finish(m_put_time);
  }

  // The same figures as the C++ stores' stats (store_stat_fields), for this
  // cache object: counted under its lock, times sampled.
  pc::StoreStats stats() {
    std::lock_guard l(m_mu);
    pc::StoreStats s = m_stats;
    s.entries = m_lru.size();
    s.bytes_stored = m_lru.bytes();
    pc::set_times(s, m_get_time.summary(), m_put_time.summary());
    return s;
  }

  bool erase(const nb::bytes& key) {
    std::lock_guard l(m_mu);
    return m_lru.erase(view_of(key));
  }

  void clear() {
    std::lock_guard l(m_mu);
    m_lru.clear();
  }

  std::size_t size() {
    std::lock_guard l(m_mu);
    return m_lru.size();
  }
  std::uint64_t bytes() {
    std::lock_guard l(m_mu);
    return m_lru.bytes();
  }

 private:
  // Looked up by a view of the caller's key bytes, without building a string.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static constexpr int k_memory_cache_get = 100, k_memory_cache_put = 101;  // sample sites
  std::optional<std::uint64_t> m_cap;
  std::mutex m_mu;
  pc::LruMap<std::string, nb::object, KeyHash> m_lru;
  pc::StoreStats m_stats;  // hits, misses, puts, evictions, bytes: under m_mu
  pc::LatencyHistogram m_get_time, m_put_time;
};

// ---------------------------------------------------------------- stores

// A progcache Store (file, redis or tiered) as seen from Python. Keys are
// the caller's bytes, mapped with key_from_user (32 bytes are the key itself,
// 64 hex digits its hex spelling, anything else is hashed), like the CLI.
class StoreHandle {
 public:
  // `file`: the store is this FileStore (fast reads, host stats, root).
  // `disk`: the FileStore tier inside it, for its caps (tiered stores).
  explicit StoreHandle(std::unique_ptr<pc::Store> s, pc::FileStore* file = nullptr, pc::FileStore* disk = nullptr)
      : m_store(std::move(s)), m_file(file), m_disk(disk != nullptr ? disk : file) {}

  // The store, shared with the caller for the length of its call: taken
  // with the GIL held, before the call releases it, so a close() on another
  // thread meanwhile cannot free the store under a read in flight.
  std::shared_ptr<pc::Store> store() {
    if (!m_store) throw std::runtime_error("cache is closed");
    return m_store;
  }

  // The primary artifact's bytes, or None, written straight into a new bytes
  // object: from the disk store the file is streamed into it (one
  // allocation, no copy); other stores copy their hit into it once.
  nb::object get(const nb::bytes& key) {
    const pc::Key k = pc::key_from_user(view_of(key));
    PyObject* out = nullptr;
    pc::Result<bool> r = released([&](pc::Store& s) {
      return s.get_primary_into(k, [&](std::size_t n) -> char* {
        nb::gil_scoped_acquire acquire;
        Py_XDECREF(out);
        out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
        return out != nullptr ? PyBytes_AS_STRING(out) : nullptr;
      });
    });
    if (!r.ok() || !*r) {
      Py_XDECREF(out);
      if (!r.ok()) raise(r.status());
      return nb::none();
    }
    return nb::steal(out);
  }

  void put(const nb::bytes& key, const nb::bytes& value) {
    const pc::Key k = pc::key_from_user(view_of(key));
    // Copied: a tier may keep the buffer after this call (and after the
    // Python object is gone), and the copy is made before the GIL is released.
    const pc::Bytes payload = pc::Bytes::copy_of(view_of(value));
    check(released([&](pc::Store& s) { return s.put(k, pc::Entry::from_bytes(payload)); }));
  }

  // A whole entry: (metadata JSON, [(name, bytes)]) or None.
  nb::object get_entry(const nb::bytes& key) {
    const pc::Key k = pc::key_from_user(view_of(key));
    auto e = unwrap(released([&](pc::Store& s) { return s.get(k); }));
    if (!e) return nb::none();
    nb::list arts;
    for (const auto& a : e->artifacts()) arts.append(nb::make_tuple(a.name, to_bytes(a.data)));
    return nb::make_tuple(e->metadata(), arts);
  }

  void put_entry(const nb::bytes& key, const std::string& metadata,
                 const std::vector<std::pair<std::string, nb::bytes>>& artifacts) {
    const pc::Key k = pc::key_from_user(view_of(key));
    std::vector<pc::Artifact> arts;
    for (const auto& [name, data] : artifacts) arts.push_back({name, pc::Bytes::copy_of(view_of(data))});
    pc::Entry entry(metadata, std::move(arts));
    check(entry.validate());
    check(released([&](pc::Store& s) { return s.put(k, entry); }));
  }

  bool erase(const nb::bytes& key) {
    const pc::Key k = pc::key_from_user(view_of(key));
    return unwrap(released([&](pc::Store& s) { return s.erase(k); }));
  }

  // A lookup the caller answered from its own copy of an entry (Store::
  // count_copy_hit).
  void count_copy_hit() { store()->count_copy_hit(); }

  // A lookup that missed, then was served after a wait (Store::uncount_miss).
  void uncount_miss() { store()->uncount_miss(); }

  // Whether the local disk tier holds a file for `key`, looked at without
  // counting a lookup (a look again under a lock, after a counted miss).
  // True when there is no disk tier: the caller then looks up as usual.
  bool disk_has(const nb::bytes& key) {
    if (m_disk == nullptr) return true;
    struct stat st {};
    return ::lstat(m_disk->entry_path(pc::key_from_user(view_of(key))).c_str(), &st) == 0;
  }

  void clear() {
    check(released([](pc::Store& s) { return s.clear(); }));
  }

  std::uint64_t count() { return unwrap(store()->count()); }
  std::uint64_t size_bytes() { return unwrap(store()->size_bytes()); }

  nb::dict stats() {
    const pc::StoreStats s = m_file != nullptr ? m_file->host_stats() : store()->stats();
    nb::dict out = stats_dict(s);
    // The remote tier's own counters, where there is one: its refusals
    // (credentials, a missing bucket, the clock) apart from its outages.
    if (auto* tiered = dynamic_cast<pc::TieredStore*>(store().get()); tiered != nullptr) {
      if (auto rs = tiered->remote_stats()) {
        out["remote_timeouts"] = rs->timeouts;
        out["remote_failures"] = rs->failures;
        out["remote_refused"] = rs->refused;
        out["remote_last_error"] = rs->last_error;
      }
    }
    return out;
  }

  std::string root() const { return m_file != nullptr ? m_file->root() : std::string(); }
  // The disk tier (nullptr when there is none), with the store that owns it
  // held for the caller's call.
  std::pair<std::shared_ptr<pc::Store>, pc::FileStore*> disk() {
    auto s = store();
    return {std::move(s), m_disk};
  }
  // The disk tier's byte cap as the library applies it (None: no cap).
  std::optional<std::uint64_t> max_size_bytes() const {
    return m_disk != nullptr ? m_disk->max_size_bytes() : std::nullopt;
  }

  // Later calls see a closed cache at once; the store itself goes when the
  // last call still using it returns.
  void close() {
    const std::shared_ptr<pc::Store> s = std::move(m_store);
    m_store.reset();
    m_file = m_disk = nullptr;
    if (s) {
      nb::gil_scoped_release release;
      s->close().ignore();
    }
  }

 private:
  // `call` on the store with the GIL released, the store held for the call
  // (store()). The GIL is taken back before the store is let go.
  template <class Call>
  std::invoke_result_t<Call&, pc::Store&> released(Call&& call) {
    const std::shared_ptr<pc::Store> s = store();
    nb::gil_scoped_release release;
    return call(*s);
  }

  std::shared_ptr<pc::Store> m_store;
  pc::FileStore* m_file;  // when the store is a FileStore (for host stats, root)
  pc::FileStore* m_disk;  // the disk tier, owned by m_store
};

// ---------------------------------------------------------------- front

// The base of every Python cache class: `cache[key]` is its type's C-level
// subscript slot (subscript() below), answered with no Python frame and no
// argument dispatch in between (those were half of a memory hit's time).
// The key is bytes, or a str as its UTF-8, as _key() makes it in Python; a
// miss is KeyError(key). The backend is a MemoryCache or a Store, called
// directly, or any object with get(key) (the null store of PROGCACHE_DISABLE).
class CacheFront {
 public:
  void bind(nb::object backend) {
    m_mem = nullptr;
    m_store = nullptr;
    if (!nb::try_cast<MemoryCache*>(backend, m_mem)) nb::try_cast<StoreHandle*>(backend, m_store);
    m_backend = std::move(backend);
  }

  nb::object getitem(PyObject* key) {
    nb::object value;
    const nb::bytes k = key_bytes(key);
    // Held for the call: a store read releases the GIL, and another thread
    // may rebind this front meanwhile (the raw pointers below live in it).
    const nb::object keep = m_backend;
    if (m_mem != nullptr) {
      value = m_mem->get(k);
    } else if (m_store != nullptr) {
      value = m_store->get(k);
    } else if (m_backend.is_valid()) {
      value = m_backend.attr("get")(k);
    } else {
      throw std::runtime_error("cache is not initialised (a subclass's __init__ must run the base's)");
    }
    if (value.is_none()) {
      PyErr_SetObject(PyExc_KeyError, key);
      throw nb::python_error();
    }
    return value;
  }

 private:
  static nb::bytes key_bytes(PyObject* key) {
    if (PyBytes_Check(key)) return nb::borrow<nb::bytes>(key);
    if (PyUnicode_Check(key)) {
      PyObject* utf8 = PyUnicode_AsUTF8String(key);
      if (utf8 == nullptr) throw nb::python_error();
      return nb::steal<nb::bytes>(utf8);
    }
    const nb::str type(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(key))).attr("__name__"));
    throw nb::type_error((std::string("cache keys are bytes or str, not ") + type.c_str()).c_str());
  }

  // The backend never refers back to the cache (a MemoryCache holds only
  // values, a Store nothing of Python's), so this reference closes no cycle
  // and the type needs no garbage-collector hooks.
  nb::object m_backend;
  MemoryCache* m_mem = nullptr;    // owned by m_backend
  StoreHandle* m_store = nullptr;  // owned by m_backend
};

// The Python exception nanobind raises for one of its C++ exceptions.
PyObject* python_type_of(nb::exception_type t) {
  switch (t) {
    case nb::exception_type::stop_iteration:
      return PyExc_StopIteration;
    case nb::exception_type::index_error:
      return PyExc_IndexError;
    case nb::exception_type::key_error:
      return PyExc_KeyError;
    case nb::exception_type::value_error:
      return PyExc_ValueError;
    case nb::exception_type::type_error:
      return PyExc_TypeError;
    case nb::exception_type::buffer_error:
      return PyExc_BufferError;
    case nb::exception_type::import_error:
      return PyExc_ImportError;
    case nb::exception_type::attribute_error:
      return PyExc_AttributeError;
    default:
      return PyExc_RuntimeError;
  }
}

// CacheFront's mp_subscript. A Python subclass that defines no __getitem__
// of its own inherits this slot as it is, so `cache[key]` calls it directly.
PyObject* cache_front_subscript(PyObject* self, PyObject* key) noexcept {
  try {
    if (!nb::inst_ready(self)) {
      PyErr_SetString(PyExc_RuntimeError, "cache is not initialised (a subclass's __init__ must run the base's)");
      return nullptr;
    }
    return nb::inst_ptr<CacheFront>(self)->getitem(key).release().ptr();
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {
    PyErr_SetString(python_type_of(e.type()), e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

PyType_Slot cache_front_slots[] = {{Py_mp_subscript, reinterpret_cast<void*>(cache_front_subscript)}, {0, nullptr}};

pc::Sharing sharing_of(const std::string& sharing) {
  if (sharing == "group") return pc::Sharing::group;
  if (sharing == "private") return pc::Sharing::private_only;
  throw nb::value_error(("sharing must be 'private' or 'group', not '" + sharing + "'").c_str());
}

// Ed25519 keys from the configuration (resolve_config()["signing_keys"]),
// handed back to the open functions as they are.
struct KeysHandle {
  std::shared_ptr<const pc::SigningKeys> keys;
};

std::shared_ptr<const pc::SigningKeys> keys_of(const KeysHandle* h) {
  return h != nullptr ? h->keys : nullptr;
}

// max_size None is no cap, as in cuda.core's caches.
std::unique_ptr<StoreHandle> open_file_store(const std::string& root, std::optional<std::uint64_t> max_size,
                                             std::optional<std::uint64_t> max_entries, bool fsync,
                                             const nb::bytes& hmac_key, const std::string& sharing, int compression,
                                             const KeysHandle* signing_keys, const std::string& cap_root,
                                             bool count_lookups) {
  pc::FileStoreOptions o;
  o.root = root;
  o.cap_root = cap_root;
  o.count_lookups = count_lookups;
  o.max_size_bytes = max_size;
  o.sharing = sharing_of(sharing);
  o.max_entries = max_entries;
  o.durability = fsync ? pc::Durability::fsync : pc::Durability::none;
  o.codec.hmac_key = std::string(view_of(hmac_key));
  o.codec.keys = pc::disk_signing_keys(keys_of(signing_keys), o.sharing);
  o.codec.compression_level = compression;
  auto fs = unwrap(pc::FileStore::open(o));
  pc::FileStore* raw = fs.get();
  return std::make_unique<StoreHandle>(std::move(fs), raw);
}

std::unique_ptr<pc::RemoteStore> open_remote(const std::vector<std::string>& urls, bool read_only,
                                             const nb::bytes& hmac_key, const std::string& password, int compression,
                                             const KeysHandle* signing_keys) {
  return unwrap(pc::make_remote_store({.urls = urls,
                                       .password = password,
                                       .read_only = read_only,
                                       .codec = {.hmac_key = std::string(view_of(hmac_key)),
                                                 .keys = keys_of(signing_keys),
                                                 .compression_level = compression}}));
}

pc::CodeType code_type_of(const std::string& s) {
  return unwrap(pc::parse_code_type(s));
}

// One program from what the Python layer passes, for program_key and compile
// alike.
pc::Program program_of(const nb::bytes& code, const std::string& code_type, const std::vector<std::string>& options,
                       const std::vector<std::string>& name_expressions, const std::string& name,
                       const std::optional<nb::bytes>& extra_digest) {
  pc::Program p;
  p.code = std::string(view_of(code));
  p.code_type = code_type_of(code_type);
  p.options = options;
  p.name_expressions = name_expressions;
  p.name = name;
  if (extra_digest) p.extra_digest = std::string(view_of(*extra_digest));
  return p;
}

// A Python value as a typed key value: None, bool, int (64-bit), float (by
// its exact bits), str, bytes-like, lists/tuples and str-keyed dicts of
// them. Anything else is a TypeError, never its repr: a stringified object
// can name two different values alike.
pc::KeyValue key_value_of(nb::handle v, int depth = 0) {
  if (depth > 64) throw nb::value_error("a cache-key value is nested more than 64 deep");
  if (v.is_none()) return pc::KeyValue(pc::KeyValue::None{});
  if (PyBool_Check(v.ptr())) return pc::KeyValue(v.ptr() == Py_True);
  if (PyLong_Check(v.ptr())) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) return pc::KeyValue(i);
    const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (!PyErr_Occurred()) return pc::KeyValue(u);
    PyErr_Clear();
    throw nb::type_error("an int in a cache key must fit in 64 bits (pass it as a str)");
  }
  if (PyFloat_Check(v.ptr())) return pc::KeyValue(PyFloat_AsDouble(v.ptr()));
  if (nb::isinstance<nb::str>(v)) return pc::KeyValue(nb::cast<std::string>(v));
  if (PyBytes_Check(v.ptr())) {
    return pc::KeyValue::bytes(std::string(PyBytes_AsString(v.ptr()), static_cast<std::size_t>(PyBytes_Size(v.ptr()))));
  }
  if (PyByteArray_Check(v.ptr()) || PyMemoryView_Check(v.ptr())) {
    nb::object b = nb::steal(PyBytes_FromObject(v.ptr()));
    if (!b.is_valid()) throw nb::python_error();
    return key_value_of(b, depth + 1);
  }
  if (PyList_Check(v.ptr()) || PyTuple_Check(v.ptr())) {
    pc::KeyValue::List out;
    for (nb::handle item : v) out.push_back(key_value_of(item, depth + 1));
    return pc::KeyValue(std::move(out));
  }
  if (PyDict_Check(v.ptr())) {
    pc::KeyValue::Map out;
    for (auto [k, item] : nb::borrow<nb::dict>(v)) {
      if (!nb::isinstance<nb::str>(k)) throw nb::type_error("mapping keys in cache keys must be str");
      out.emplace(nb::cast<std::string>(k), key_value_of(item, depth + 1));
    }
    return pc::KeyValue(std::move(out));
  }
  const bool has_dtype = PyObject_HasAttrString(v.ptr(), "dtype") != 0;
  throw nb::type_error((std::string("cannot put a ") + Py_TYPE(v.ptr())->tp_name +
                        " into a cache key: use int, float, bool, str, bytes, None, or lists/tuples/dicts of them" +
                        (has_dtype ? " (pass the dtype's name)" : ""))
                           .c_str());
}
pc::TargetType target_of(const std::string& s) {
  return unwrap(pc::parse_target_type(s));
}

// The library's LockFile held from Python (KernelCache's single-flight
// across processes). Waiting happens with the GIL released.
class HeldLock {
 public:
  HeldLock(const std::string& dir, const std::string& name, double timeout_s, bool group) {
    // Clamped to a year: an infinite or huge timeout is "wait", not overflow.
    const double ms = std::min(std::max(0.0, timeout_s), 365.0 * 86400.0) * 1000.0;
    const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(ms));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // Waited for in slices, Python's signals checked between them: Ctrl-C
    // (or any handler that raises) ends a wait for another process's compile
    // as it ends the compile itself.
    constexpr auto k_slice = std::chrono::milliseconds(200);
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      const auto now_slice = std::max(std::chrono::milliseconds(0), std::min(left, k_slice));
      std::optional<pc::Result<pc::LockFile>> got;
      bool waited = false;
      {
        nb::gil_scoped_release release;
        got.emplace(pc::LockFile::acquire(pc::Env::posix(), dir, name, now_slice, &waited, group ? 02770 : 0700,
                                          group ? 0660 : 0600));
      }
      m_waited = m_waited || waited;
      if (got->ok()) {
        m_lock.emplace(std::move(**got));
        return;
      }
      if (got->status().code() != pc::Code::deadline_exceeded) raise(got->status());
      if (left <= k_slice) {
        raise(pc::deadline_exceeded("timed out after " + std::to_string(timeout.count()) +
                                    " ms waiting for the lock '" + name + "' in " + dir));
      }
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
  }
  void release() { m_lock.reset(); }
  [[nodiscard]] bool waited() const { return m_waited; }

 private:
  std::optional<pc::LockFile> m_lock;
  bool m_waited = false;
};

// The library's in-process single-flight for Python callables: calls of
// run() for one key that overlap share one call of `fn`. The others wait
// with the GIL released and get the leader's result; if the leader raised,
// they try again (one of them leads the next call).
class Flights {
 public:
  // (result, whether this caller ran fn)
  std::pair<nb::object, bool> run(const std::string& key, const nb::callable& fn) {
    while (true) {
      auto [flight, leader] = m_table.join(key);
      if (leader) {
        std::optional<nb::object> out;
        try {
          out = fn();
        } catch (...) {
          m_table.finish(key, flight, std::nullopt);
          throw;
        }
        m_table.finish(key, flight, out);
        return {*out, true};
      }
      {
        nb::gil_scoped_release release;
        flight->wait();
      }
      if (auto got = flight->result()) return {*got, false};
    }
  }

 private:
  pc::FlightTable<std::string, nb::object> m_table;
};

}  // namespace

// held_places.cpp: progcache.torch's check of a C++ build's manifest.
void bind_held_places(nb::module_& m);

NB_MODULE(_core, m) {
  m.doc() = "progcache's C++ core (use the progcache package, not this module)";
  m.attr("__version__") = PROGCACHE_VERSION_STRING;
  bind_held_places(m);

  nb::class_<MemoryCache>(m, "MemoryCache")
      .def(nb::init<std::optional<std::uint64_t>>(), nb::arg("max_size_bytes").none())
      .def("get", &MemoryCache::get)
      .def("put", &MemoryCache::put)
      .def("erase", &MemoryCache::erase)
      .def("clear", &MemoryCache::clear)
      .def("__len__", &MemoryCache::size)
      .def("size_bytes", &MemoryCache::bytes)
      .def("stats", [](MemoryCache& c) { return stats_dict(c.stats()); });

  nb::class_<HeldLock>(m, "LockFile")
      .def(nb::init<const std::string&, const std::string&, double, bool>(), nb::arg("dir"), nb::arg("name"),
           nb::arg("timeout_s"), nb::arg("group"))
      .def("release", &HeldLock::release)
      .def_prop_ro("waited", &HeldLock::waited);

  nb::class_<Flights>(m, "Flights").def(nb::init<>()).def("run", &Flights::run, nb::arg("key"), nb::arg("fn"));

  nb::class_<CacheFront>(m, "CacheFront", nb::type_slots(cache_front_slots))
      .def(nb::init<>())
      .def("_front_bind", &CacheFront::bind, nb::arg("backend"));

  nb::class_<StoreHandle>(m, "Store")
      .def("get", &StoreHandle::get)
      .def("put", &StoreHandle::put)
      .def("get_entry", &StoreHandle::get_entry)
      .def("put_entry", &StoreHandle::put_entry)
      .def("erase", &StoreHandle::erase)
      .def("count_copy_hit", &StoreHandle::count_copy_hit)
      .def("uncount_miss", &StoreHandle::uncount_miss)
      .def("disk_has", &StoreHandle::disk_has, nb::arg("key"))
      .def("clear", &StoreHandle::clear)
      .def("count", &StoreHandle::count)
      .def("size_bytes", &StoreHandle::size_bytes)
      .def("stats", &StoreHandle::stats)
      .def("root", &StoreHandle::root)
      .def("max_size_bytes", &StoreHandle::max_size_bytes)
      .def("close", &StoreHandle::close);

  nb::class_<KeysHandle>(m, "SigningKeys")
      .def_prop_ro("can_sign", [](const KeysHandle& h) { return h.keys->can_sign(); })
      .def_prop_ro("trusted", [](const KeysHandle& h) {
        std::vector<std::string> out;
        for (const auto& k : h.keys->trusted()) out.push_back(pc::SigningKeys::fingerprint(k));
        return out;
      });
  m.def("open_file_store", &open_file_store, nb::arg("root"), nb::arg("max_size_bytes").none(),
        nb::arg("max_entries").none(), nb::arg("fsync") = false, nb::arg("hmac_key") = nb::bytes(""),
        nb::arg("sharing") = "private", nb::arg("compression") = 0, nb::arg("signing_keys").none() = nb::none(),
        nb::arg("cap_root") = "", nb::arg("count_lookups") = true);
  m.attr("DEFAULT_MAX_SIZE") = pc::k_default_max_size;
  m.def("default_cache_root", []() { return pc::default_cache_root(); });
  m.def(
      "library_search_paths", [](const std::string& library) { return pc::library_search_paths(library); },
      nb::arg("library"));
  // The library's configuration, resolved from the environment by the same
  // code as the CLI's (ValueError naming a bad variable). Secrets are
  // returned for use, and masked in `settings`.
  m.def(
      "resolve_config",
      [](std::optional<std::string> dir) {
        pc::ConfigOverrides o;
        o.dir = std::move(dir);  // as the CLI's --dir: that root, and its settings file
        const pc::Config c = unwrap(pc::resolve_config(o));
        // A settings file that cannot be used was skipped (defaults apply):
        // said as a RuntimeWarning, an exception where warnings are errors.
        for (const auto& w : c.warnings) {
          if (PyErr_WarnEx(PyExc_RuntimeWarning, ("progcache: " + w).c_str(), 1) != 0) throw nb::python_error();
        }
        nb::dict d;
        d["dir"] = c.dir;
        d["max_size_bytes"] = c.max_size_bytes ? nb::cast(*c.max_size_bytes) : nb::none();
        d["max_entries"] = c.max_entries ? nb::cast(*c.max_entries) : nb::none();
        d["disabled"] = c.disabled;
        d["fsync"] = c.durability == pc::Durability::fsync;
        d["sharing"] = c.sharing == pc::Sharing::group ? "group" : "private";
        d["hmac_key"] = nb::bytes(c.hmac_key.data(), c.hmac_key.size());
        d["signing_keys"] = c.signing_keys ? nb::cast(KeysHandle{c.signing_keys}) : nb::none();
        d["compression_level"] = c.compression_level;
        d["compressing_store_level"] = c.compressing_store_level();
        d["remote_compression_level"] = c.remote_compression_level;
        d["remote_urls"] = c.remote_urls;
        d["remote_password"] = c.remote_password;
        d["read_only"] = c.read_only;
        d["lock_timeout_s"] = std::chrono::duration<double>(c.lock_timeout).count();
        nb::dict sources;
        nb::list settings;
        for (const auto& s : c.settings) {
          sources[s.name.c_str()] = s.source;
          settings.append(nb::make_tuple(s.name, s.value, s.source));
        }
        d["sources"] = sources;
        d["settings"] = settings;
        d["warnings"] = c.warnings;
        // The library's rule for host code (trust.h), applied once here so
        // every Python integration asks the same rule.
        const pc::CodeTrust t = pc::host_code_trust(c);
        nb::dict host;
        host["disk"] = t.disk;
        host["remote"] = t.remote;
        host["disk_reason"] = t.disk_reason;
        host["remote_reason"] = t.remote_reason;
        d["host_code"] = host;
        return d;
      },
      nb::arg("dir").none() = nb::none());
  m.def(
      "classify_artifact",
      [](const std::string& name, const nb::bytes& data) {
        return pc::classify_artifact(name, std::string_view(data.c_str(), data.size())) == pc::CodeKind::host
                   ? "host"
                   : "device";
      },
      nb::arg("name"), nb::arg("data"));
  // Creates a directory's missing parts private and judges it and its
  // ancestors as the file store judges a private root (PermissionError,
  // or another OSError, saying why).
  m.def(
      "prepare_private_dir",
      [](const std::string& dir) {
        pc::Status st;
        {
          nb::gil_scoped_release unlocked;
          st = pc::prepare_private_dir(dir);
        }
        check(st);
      },
      nb::arg("dir"));

  const auto schemes = pc::remote_schemes();
  m.attr("REMOTE_SCHEMES") = schemes;
  // Where the kernel caches keep their stores in a root (the CLI visits them).
  nb::dict companions;
  for (const auto& c : pc::companion_stores())
    companions[nb::str(c.name.data(), c.name.size())] = std::string(c.subdir);
  m.attr("COMPANION_STORES") = companions;
  m.attr("HAVE_REDIS") = std::find(schemes.begin(), schemes.end(), "redis") != schemes.end();
  m.def(
      "open_remote_store",
      [](const std::vector<std::string>& urls, bool read_only, const nb::bytes& hmac_key, const std::string& password,
         int compression, const KeysHandle* signing_keys) {
        return std::make_unique<StoreHandle>(
            open_remote(urls, read_only, hmac_key, password, compression, signing_keys));
      },
      nb::arg("urls"), nb::arg("read_only") = false, nb::arg("hmac_key") = nb::bytes(""), nb::arg("password") = "",
      nb::arg("compression") = 0, nb::arg("signing_keys").none() = nb::none());
  m.def(
      "open_tiered_store",
      [](std::optional<std::uint64_t> memory_bytes, const std::string& root, std::optional<std::uint64_t> max_size,
         const std::vector<std::string>& urls, bool read_only, const nb::bytes& hmac_key, const std::string& sharing,
         std::optional<std::uint64_t> max_entries, bool fsync, const std::string& password, int compression,
         int remote_compression, const KeysHandle* signing_keys, const std::string& cap_root) {
        pc::TieredStoreOptions o;
        // The remote first: a URL this build cannot serve fails before the
        // cache directory is touched.
        if (!urls.empty()) {
          o.remote = open_remote(urls, read_only, hmac_key, password, remote_compression, signing_keys);
        }
        if (!memory_bytes || *memory_bytes > 0)
          o.memory = unwrap(pc::make_memory_store({.max_size_bytes = memory_bytes}));
        pc::FileStoreOptions fo;
        fo.root = root;
        fo.cap_root = cap_root;        // the cache root whose stores share the cap ("" : this store alone)
        fo.max_size_bytes = max_size;  // None: no cap
        fo.max_entries = max_entries;
        fo.durability = fsync ? pc::Durability::fsync : pc::Durability::none;
        fo.sharing = sharing_of(sharing);
        fo.codec.hmac_key = std::string(view_of(hmac_key));
        fo.codec.keys = pc::disk_signing_keys(keys_of(signing_keys), fo.sharing);
        fo.codec.compression_level = compression;
        std::unique_ptr<pc::FileStore> fs = unwrap(pc::FileStore::open(fo));
        pc::FileStore* disk = fs.get();
        o.disk = std::move(fs);
        return std::make_unique<StoreHandle>(pc::make_tiered_store(std::move(o)), nullptr, disk);
      },
      nb::arg("memory_bytes").none(), nb::arg("root"), nb::arg("max_size_bytes").none(), nb::arg("urls"),
      nb::arg("read_only") = false, nb::arg("hmac_key") = nb::bytes(""), nb::arg("sharing") = "private",
      nb::arg("max_entries").none() = nb::none(), nb::arg("fsync") = false, nb::arg("password") = "",
      nb::arg("compression") = 0, nb::arg("remote_compression") = 0, nb::arg("signing_keys").none() = nb::none(),
      nb::arg("cap_root") = "");

  // The key of one program, through the same library function compile()
  // uses (pc::program_key): the compiler identity, the program name and the
  // scan of every file the compiler can read are in it. 32 raw bytes.
  m.def(
      "program_key",
      [](const nb::bytes& code, const std::string& code_type, const std::string& target,
         const std::vector<std::string>& options, const std::vector<std::string>& name_expressions,
         const std::string& name, std::optional<nb::bytes> extra_digest,
         const std::vector<std::pair<std::string, nb::bytes>>& nvvm_extra_sources, bool use_libdevice,
         const std::string& state_dir) {
        pc::Program p = program_of(code, code_type, options, name_expressions, name, extra_digest);
        for (const auto& [src_name, src] : nvvm_extra_sources) {
          p.nvvm_extra_sources.push_back({src_name, std::string(view_of(src))});
        }
        p.use_libdevice = use_libdevice;
        const pc::TargetType t = target_of(target);
        pc::CompileOptions o;
        o.state_dir = state_dir;
        pc::Result<pc::Key> k = pc::Status();
        {
          nb::gil_scoped_release release;  // the header scan reads files
          k = pc::program_key(p, t, o);
        }
        const pc::Key key = unwrap(std::move(k));
        return nb::bytes(key.bytes.data(), key.bytes.size());
      },
      nb::arg("code"), nb::arg("code_type"), nb::arg("target"), nb::arg("options"), nb::arg("name_expressions"),
      nb::arg("name"), nb::arg("extra_digest").none(), nb::arg("nvvm_extra_sources"), nb::arg("use_libdevice"),
      nb::arg("state_dir"));

  // pyptx's CacheKey, through the library's KernelKey: typed values, the
  // kwargs a map (order never matters). 32 raw bytes.
  m.def("kernel_key",
        [](const std::string& fn_id, const nb::dict& template_kwargs,
           const std::vector<std::pair<std::vector<std::int64_t>, std::string>>& shapes, const std::string& arch) {
          pc::KernelKey k;
          k.fn_id = fn_id;
          for (auto [name, value] : template_kwargs) {
            if (!nb::isinstance<nb::str>(name)) throw nb::type_error("template kwarg names must be str");
            k.template_kwargs.emplace(nb::cast<std::string>(name), key_value_of(value));
          }
          for (const auto& [shape, dtype] : shapes) k.input_shapes.push_back({shape, dtype});
          k.arch = arch;
          const pc::Key key = k.key();
          return nb::bytes(key.bytes.data(), key.bytes.size());
        });

  // Any caller-defined identity (tilelang-style kernel builds): labelled,
  // typed fields under a domain, through the library's KeyBuilder.
  m.def("typed_key", [](const std::string& domain, const std::vector<std::pair<std::string, nb::handle>>& fields) {
    pc::KeyBuilder b(domain);
    for (const auto& [label, value] : fields) b.add(label, key_value_of(value));
    const pc::Key key = b.finish();
    return nb::bytes(key.bytes.data(), key.bytes.size());
  });

  // The checksum every file hit verifies (XXH3-128, the library's own
  // build): bench/python_hits.py times a bare read plus this as the floor of
  // any verified hit.
  m.def("entry_checksum", [](const nb::bytes& data) {
    const pc::Digest128 d = pc::xxh3_128(view_of(data));
    return nb::bytes(d.data(), d.size());
  });

  m.def(
      "prefer_library",
      [](const std::string& library, std::string path) { pc::prefer_library(library, std::move(path)); },
      nb::arg("library"), nb::arg("path"));

  m.def(
      "library_fingerprint",
      [](const std::string& library, const std::string& path, const std::string& state_dir) {
        nb::gil_scoped_release release;
        return unwrap(pc::cuda::file_fingerprint(library, path, state_dir));
      },
      nb::arg("library"), nb::arg("path"), nb::arg("state_dir"));

  m.def("compile_stats", []() {
    const pc::CompileStats s = pc::compile_stats();
    return std::map<std::string, std::uint64_t>{{"compiles", s.compiles},
                                                {"compile_errors", s.compile_errors},
                                                {"hits", s.hits},
                                                {"shared_waits", s.shared_waits},
                                                {"lock_waits", s.lock_waits},
                                                {"cache_errors", s.cache_errors},
                                                {"unstable_inputs", s.unstable_inputs},
                                                {"uncacheable", s.uncacheable},
                                                {"bytes_served", s.bytes_served},
                                                {"hit_samples", s.hit_samples},
                                                {"hit_p50_ns", s.hit_p50_ns},
                                                {"hit_p99_ns", s.hit_p99_ns},
                                                {"compile_p50_ns", s.compile_p50_ns},
                                                {"compile_p99_ns", s.compile_p99_ns}};
  });

  m.def(
      "compile",
      [](const nb::bytes& code, const std::string& code_type, const std::string& target,
         const std::vector<std::string>& options, const std::vector<std::string>& name_expressions,
         const std::string& name, std::optional<nb::bytes> extra_digest, StoreHandle* cache,
         const std::string& state_dir) {
        pc::Program p = program_of(code, code_type, options, name_expressions, name, extra_digest);
        const pc::TargetType t = target_of(target);
        pc::CompileOptions o;
        const std::shared_ptr<pc::Store> store = cache != nullptr ? cache->store() : nullptr;  // held for the call
        o.cache = store.get();
        o.state_dir = state_dir;
        pc::CompileFailure failure;
        pc::Result<pc::ObjectCode> r = pc::Status();
        {
          nb::gil_scoped_release release;
          r = pc::compile(p, t, o, &failure);
        }
        if (!r.ok()) {
          if (r.status().code() == pc::Code::compile_error) {
            return nb::make_tuple(false, r.status().message(), failure.log, nb::none(), nb::none(), nb::none(),
                                  nb::none());
          }
          raise(r.status());
        }
        // What could not be keyed was compiled uncached: no key, and why.
        if (!r->uncacheable.empty()) {
          return nb::make_tuple(true, to_bytes(r->code), r->log, r->symbol_mapping, false, nb::none(), r->uncacheable);
        }
        return nb::make_tuple(true, to_bytes(r->code), r->log, r->symbol_mapping, r->from_cache,
                              nb::bytes(r->key.bytes.data(), r->key.bytes.size()), nb::none());
      },
      nb::arg("code"), nb::arg("code_type"), nb::arg("target"), nb::arg("options"), nb::arg("name_expressions"),
      nb::arg("name"), nb::arg("extra_digest").none(), nb::arg("cache").none(), nb::arg("state_dir"));

  // pc::explain over the cache's disk tier: a dict (see progcache.explain).
  m.def(
      "explain",
      [](const nb::bytes& code, const std::string& code_type, const std::string& target,
         const std::vector<std::string>& options, const std::vector<std::string>& name_expressions,
         const std::string& name, std::optional<nb::bytes> extra_digest, StoreHandle& cache,
         const std::string& state_dir) {
        pc::Program p = program_of(code, code_type, options, name_expressions, name, extra_digest);
        const pc::TargetType t = target_of(target);
        auto [owner, disk] = cache.disk();
        if (disk == nullptr) throw nb::value_error("explain() reads a cache's disk store: this cache has none");
        pc::CompileOptions o;
        o.state_dir = state_dir;
        pc::Result<pc::Explanation> r = pc::Status();
        {
          nb::gil_scoped_release release;
          r = pc::explain(p, t, *disk, o);
        }
        const pc::Explanation e = unwrap(std::move(r));
        static constexpr const char* k_outcomes[] = {"hit", "miss", "damaged"};
        nb::list diffs;
        for (const auto& d : e.differences) {
          nb::dict row;
          row["component"] = d.component;
          row["change"] = d.change;
          row["subject"] = d.subject;
          row["before"] = d.before;
          row["after"] = d.after;
          diffs.append(row);
        }
        nb::dict out;
        out["key"] = nb::bytes(e.key.bytes.data(), e.key.bytes.size());
        out["outcome"] = k_outcomes[static_cast<int>(e.outcome)];
        out["detail"] = e.detail;
        out["name"] = e.program_name;
        out["target"] = e.target;
        out["same_name"] = e.same_name;
        out["without_record"] = e.without_record;
        out["nearest"] = e.nearest ? nb::object(nb::bytes(e.nearest->bytes.data(), e.nearest->bytes.size()))
                                   : nb::object(nb::none());
        out["differences"] = diffs;
        out["record"] = e.record;
        return out;
      },
      nb::arg("code"), nb::arg("code_type"), nb::arg("target"), nb::arg("options"), nb::arg("name_expressions"),
      nb::arg("name"), nb::arg("extra_digest").none(), nb::arg("cache"), nb::arg("state_dir"));
}
