// nvcc/programs.cpp — the programs a compile runs, found as the shell
// finds them, and their identities in the key.
#include "nvcc/programs.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/scan_files.h"
#include "nvcc/nvcc_command.h"
#include "progcache/key.h"

namespace progcache::nvcc {

namespace {

namespace dt = progcache::detail;

// This program's file identity: a candidate on PATH that is this program
// (a link named nvcc to progcache) must not run itself.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
};

std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

// The first executable file named `name` in a directory of `dirs` that is
// not this program.
std::optional<std::string> search_path(const std::string& name, const std::string& dirs,
                                       const std::optional<FileId>& self) {
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const auto colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string cand = dt::join(dir, name);
    if (executable_file(cand)) {
      const auto id = file_id(cand);
      if (!self || !id || id->dev != self->dev || id->ino != self->ino) return cand;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

}  // namespace

bool executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

std::optional<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return executable_file(name) ? std::optional(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  static const std::optional<FileId> self = file_id("/proc/self/exe");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  // Asked again for a name (the host compilers, then PATH's programs in the
  // key, and again in a base directory's key): the first answer, for the
  // same PATH. A launcher lives for one command, and makes its key once.
  static std::mutex lock;
  static std::map<std::pair<std::string, std::string>, std::optional<std::string>> found;
  const std::scoped_lock hold(lock);
  const auto [it, first] = found.try_emplace({dirs, name});
  if (first) it->second = search_path(name, dirs, self);
  return it->second;
}

std::optional<std::string> find_on(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return executable_file(name) ? std::optional(name) : std::nullopt;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto colon = path.find(':', start);
    const std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

std::string real_path(const std::string& p) {
  std::error_code ec;
  auto r = std::filesystem::canonical(p, ec);
  return ec ? p : r.string();
}

void add_file_identity(KeyBuilder& kb, std::string_view label, const std::string& path) {
  struct stat st {};
  kb.add_string(label, path);
  if (::stat(path.c_str(), &st) != 0) {
    kb.add_bool("present", false);
    return;
  }
  kb.add_int("size", st.st_size)
      .add_int("mtime", dt::ns_of(st.st_mtim))
      .add_int("dev", static_cast<std::int64_t>(st.st_dev))
      .add_int("ino", static_cast<std::int64_t>(st.st_ino));
}

std::vector<std::string> host_compilers(const Command& cmd) {
  std::optional<std::string> ccbin = cmd.ccbin;
  if (!ccbin) {
    if (const char* v = std::getenv("NVCC_CCBIN"); v != nullptr && *v != '\0') ccbin = v;
  }
  std::vector<std::string> names;
  std::string dir;
  struct stat st {};
  if (!ccbin) {
    names = {"gcc", "g++", "cc", "c++"};
  } else if (::stat(ccbin->c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = *ccbin;
    names = {"gcc", "g++", "cc", "c++", "clang", "clang++", "cl"};
  } else {
    names = {*ccbin};
  }
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (!dir.empty()) {
      out.push_back(dt::join(dir, n));
    } else if (auto p = find_program(n)) {
      out.push_back(*p);
    } else {
      out.push_back("(not found) " + n);
    }
  }
  return out;
}

}  // namespace progcache::nvcc
