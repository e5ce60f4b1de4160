#include "progcache/store.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace progcache {

std::span<const StatField> store_stat_fields() {
  using U = StatField::Unit;
  static constexpr StatField k_fields[] = {
      {"entries", "entries", &StoreStats::entries, U::count, false},
      {"bytes_stored", "size", &StoreStats::bytes_stored, U::bytes, false},
      {"hits", "hits", &StoreStats::hits},
      {"misses", "misses", &StoreStats::misses},
      {"puts", "puts", &StoreStats::puts},
      {"evictions", "evictions", &StoreStats::evictions},
      {"corrupt_dropped", "corrupt dropped", &StoreStats::corrupt_dropped},
      {"rejected", "rejected", &StoreStats::rejected},
      {"errors", "errors", &StoreStats::errors},
      {"bytes_read", "read", &StoreStats::bytes_read, U::bytes},
      {"bytes_written", "written", &StoreStats::bytes_written, U::bytes},
      {"get_samples", "lookups timed", &StoreStats::get_samples},
      {"get_p50_ns", "lookup p50", &StoreStats::get_p50_ns, U::nanoseconds, false},
      {"get_p99_ns", "lookup p99", &StoreStats::get_p99_ns, U::nanoseconds, false},
      {"put_samples", "puts timed", &StoreStats::put_samples},
      {"put_p50_ns", "put p50", &StoreStats::put_p50_ns, U::nanoseconds, false},
      {"put_p99_ns", "put p99", &StoreStats::put_p99_ns, U::nanoseconds, false},
  };
  return k_fields;
}

double hit_rate(const StoreStats& s) {
  const std::uint64_t lookups = s.hits + s.misses;
  return lookups == 0 ? 0.0 : static_cast<double>(s.hits) / static_cast<double>(lookups);
}

Result<bool> Store::get_primary_into(const Key& key, const EntryReader::Alloc& alloc) {
  PROGCACHE_ASSIGN_OR_RETURN(auto entry, get(key));
  if (!entry) return false;
  const Bytes p = entry->primary();
  char* dst = alloc(p.size());
  if (dst == nullptr) return resource_exhausted("no memory for a cache hit of " + std::to_string(p.size()) + " bytes");
  if (!p.empty()) std::memcpy(dst, p.data(), p.size());
  return true;
}

Result<std::optional<Bytes>> Store::get_bytes(const Key& key) {
  PROGCACHE_ASSIGN_OR_RETURN(auto entry, get(key));
  if (!entry) return std::optional<Bytes>();
  return std::optional<Bytes>(entry->primary());
}

Status Store::put_bytes(const Key& key, Bytes payload) {
  return put(key, Entry::from_bytes(std::move(payload)));
}

namespace {

// Splits "1.5GiB" into 1.5 and "GiB". Fails on an empty or signed number.
bool split_number(std::string_view text, double* number, std::string_view* unit) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return false;
  const std::string num(text.substr(0, i));
  char* end = nullptr;
  *number = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(*number)) return false;
  *unit = text.substr(i);
  while (!unit->empty() && unit->front() == ' ') unit->remove_prefix(1);
  return true;
}

// 128-bit arithmetic keeps the size parser exact; __extension__ marks the
// GCC/Clang type as deliberate under -Wpedantic.
__extension__ typedef unsigned __int128 u128;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
  const auto bad = [&] {
    return invalid_argument("invalid size '" + std::string(text) +
                            "': use a number with an optional unit K, M, G or T (powers of 1024), e.g. 10G");
  };
  // Exact decimal arithmetic, not doubles: "9223372036854775807" is that
  // many bytes, and 1.5G is 1610612736. Digits, at most one '.', a unit.
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string_view whole = text.substr(0, i);
  std::string_view frac;
  if (i < text.size() && text[i] == '.') {
    const std::size_t start = ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    frac = text.substr(start, i - start);
  }
  if (whole.empty() && frac.empty()) return bad();
  std::string_view unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  unsigned shift = 0;
  bool known = false;
  constexpr std::pair<std::string_view, unsigned> k_units[] = {
      {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10}, {"ki", 10},  {"kib", 10}, {"m", 20},  {"mb", 20}, {"mi", 20},
      {"mib", 20}, {"g", 30}, {"gb", 30}, {"gi", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"ti", 40}, {"tib", 40}};
  for (const auto& [u, sh] : k_units) {
    if (iequals(unit, u)) {
      shift = sh;
      known = true;
    }
  }
  if (!known) return bad();
  const auto too_large = [&] {
    return invalid_argument("size '" + std::string(text) + "' is too large (the limit is 8 EiB - 1)");
  };
  constexpr u128 k_limit = static_cast<u128>(INT64_MAX);
  u128 n = 0;
  for (char c : whole) {
    n = n * 10 + static_cast<unsigned>(c - '0');
    if (n > k_limit) return too_large();
  }
  n <<= shift;
  if (n > k_limit) return too_large();
  // The fraction, rounded down to whole bytes: digits past the 20th cannot
  // change the result for units up to 2^40.
  u128 num = 0, den = 1;
  for (std::size_t k = 0; k < frac.size() && k < 20; ++k) {
    num = num * 10 + static_cast<unsigned>(frac[k] - '0');
    den *= 10;
  }
  n += (num << shift) / den;
  if (n > k_limit) return too_large();
  bool any_nonzero = false;
  for (char c : text.substr(0, i)) any_nonzero |= (c >= '1' && c <= '9');
  if (n == 0 && any_nonzero) {
    return invalid_argument("size '" + std::string(text) + "' is less than one byte; 0 means no limit");
  }
  return static_cast<std::uint64_t>(n);
}

Status check_size_unit(std::string_view name, std::string_view text) {
  // Judged as parse_size reads it: spaces around the number are no unit.
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  const bool bare = !text.empty() && std::all_of(text.begin(), text.end(),
                                                 [](unsigned char ch) { return std::isdigit(ch) != 0 || ch == '.'; });
  if (!bare) return {};
  const bool zero = std::all_of(text.begin(), text.end(), [](char ch) { return ch == '0' || ch == '.'; });
  if (zero) return {};
  return invalid_argument(std::string(name) + " '" + std::string(text) + "' has no unit: write B, K, M, G or T (e.g. " +
                          std::string(text) + "G)");
}

Result<std::int64_t> parse_duration(std::string_view text) {
  double n = 0;
  std::string_view unit;
  const auto bad = [&] {
    return invalid_argument("invalid duration '" + std::string(text) +
                            "': use a number with a unit s, m, h, d or w, e.g. 7d");
  };
  if (!split_number(text, &n, &unit)) return bad();
  double secs = 0;
  if (unit == "s" || unit.empty())
    secs = 1;
  else if (unit == "m" || unit == "min")
    secs = 60;
  else if (unit == "h")
    secs = 3600;
  else if (unit == "d")
    secs = 86400;
  else if (unit == "w")
    secs = 7 * 86400;
  else
    return bad();
  const double ns = n * secs * 1e9;
  if (ns >= 9.2e18) return invalid_argument("duration '" + std::string(text) + "' is too long");
  return static_cast<std::int64_t>(ns);
}

std::string format_size(std::uint64_t bytes) {
  constexpr const char* k_names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, k_names[u]);
  return buf;
}

}  // namespace progcache
