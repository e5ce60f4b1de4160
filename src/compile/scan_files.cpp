#include "scan_files.h"

#include <climits>
#include <cstdlib>
#include <vector>

#include "progcache/env.h"
#include "util/coding.h"

namespace progcache::detail {

namespace {

// Headers larger than this are refused rather than read into memory.
constexpr std::int64_t k_max_header_bytes = std::int64_t{256} << 20;

}  // namespace

std::int64_t ns_of(const struct timespec& t) {
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

Result<std::string> read_regular(const std::string& path) {
  auto r = read_regular_file(Env::posix(), path, k_max_header_bytes, OpenMode::read_follow);
  if (!r.ok()) return r.status().with_context("cannot read header");
  return r;
}

void add_field(Sha256& sha, std::string_view tag, std::string_view value) {
  sha.update(tag);
  std::string n;
  put_fixed<std::uint64_t>(n, value.size());
  sha.update(n);
  sha.update(value);
}

bool under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || dir.back() == '/' || path[dir.size()] == '/';
}

std::string normal(std::string_view p, bool keep_dotdot) {
  const bool absolute = !p.empty() && p[0] == '/';
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    const std::string_view part = p.substr(i, j - i);
    if (part == ".." && !keep_dotdot) {
      if (!parts.empty() && parts.back() != "..")
        parts.pop_back();
      else if (!absolute)
        parts.push_back(part);
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out += '/';
    out.append(parts[k]);
  }
  return out.empty() ? "." : out;
}

std::string real_or_normal(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return buf;
  return normal(path);
}

std::string parent_of(const std::string& file) {
  const std::size_t slash = file.rfind('/');
  if (slash == std::string::npos) return {};
  return slash == 0 ? "/" : file.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

}  // namespace progcache::detail
