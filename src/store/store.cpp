#include "progcache/store.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace progcache {

Result<std::optional<Bytes>> Store::get_bytes(const Key& key) {
  PROGCACHE_ASSIGN_OR_RETURN(auto entry, get(key));
  if (!entry) return std::optional<Bytes>();
  return std::optional<Bytes>(entry->primary());
}

Status Store::put_bytes(const Key& key, Bytes payload) { return put(key, Entry::from_bytes(std::move(payload))); }

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

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
  double n = 0;
  std::string_view unit;
  const auto bad = [&] {
    return invalid_argument("invalid size '" + std::string(text) +
                            "': use a number with an optional unit K, M, G or T (powers of 1024), e.g. 10G");
  };
  if (!split_number(text, &n, &unit)) return bad();
  double mult = 0;
  constexpr std::pair<std::string_view, double> k_units[] = {
      {"", 1},          {"b", 1},           {"k", 1024.0},     {"kb", 1024.0}, {"kib", 1024.0},
      {"m", 1048576.0}, {"mb", 1048576.0},  {"mib", 1048576.0}, {"g", 1073741824.0}, {"gb", 1073741824.0},
      {"gib", 1073741824.0}, {"t", 1099511627776.0}, {"tb", 1099511627776.0}, {"tib", 1099511627776.0}};
  for (const auto& [u, m] : k_units) {
    if (iequals(unit, u)) mult = m;
  }
  if (mult == 0) return bad();
  const double bytes = n * mult;
  if (bytes >= 18446744073709551615.0) return invalid_argument("size '" + std::string(text) + "' is too large");
  return static_cast<std::uint64_t>(std::llround(bytes));
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
  if (unit == "s" || unit.empty()) secs = 1;
  else if (unit == "m" || unit == "min") secs = 60;
  else if (unit == "h") secs = 3600;
  else if (unit == "d") secs = 86400;
  else if (unit == "w") secs = 7 * 86400;
  else return bad();
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
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, k_names[u]);
  return buf;
}

}  // namespace progcache
