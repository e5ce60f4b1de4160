#include "progcache/explain.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "entry/zstd_codec.h"
#include "key_record.h"
#include "progcache/entry.h"

namespace progcache {

namespace {

// At most this many entries of one program name are compared: the newest.
constexpr std::size_t k_max_candidates = 256;

// The entry under `key` as the store would serve it: nullopt when absent;
// `damage` set (and nullopt returned) when one is there that would not be
// served. Counts nothing, recency untouched.
Result<std::optional<Entry>> read_entry(FileStore& store, const Key& key, std::string* damage) {
  auto encoded = store.get_encoded(key);
  if (!encoded.ok()) {
    const Code c = encoded.status().code();
    if (c != Code::data_loss && c != Code::permission_denied) return encoded.status();
    *damage = encoded.status().message();
    return std::optional<Entry>();
  }
  if (!encoded->has_value()) return std::optional<Entry>();
  // Checked under the store's codec already (signature included): decoding
  // again needs no key.
  auto entry = decode_entry(Bytes::adopt(std::move(**encoded)), key, {});
  if (!entry.ok()) {
    *damage = entry.status().message();
    return std::optional<Entry>();
  }
  return std::optional<Entry>(std::move(*entry));
}

std::string meta_string(const Entry& e, const char* field) {
  const auto meta = nlohmann::json::parse(e.metadata(), nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return {};
  auto it = meta.find(field);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The key record's JSON; "" when the entry has none or it does not decode
// (then it is counted as without a record, never compared).
std::string record_of(const Entry& e) {
  if (const Artifact* a = e.find(k_key_record_artifact)) return std::string(a->data.view());
  const Artifact* z = e.find(k_key_record_artifact_zstd);
  if (z == nullptr) return {};
  auto size = zstd::expanded_size(z->data.view());
  if (!size.ok()) return {};
  std::string out(*size, '\0');
  if (!zstd::expand(z->data.view(), out.data(), *size).ok()) return {};
  return out;
}

}  // namespace

Result<Explanation> explain(const Program& program, TargetType target, FileStore& store,
                            const CompileOptions& options) {
  PROGCACHE_ASSIGN_OR_RETURN(detail::KeyAndRecord now, detail::key_and_record(program, target, options));
  Explanation out;
  out.key = now.key;
  out.program_name = program.name;
  out.target = std::string(target_type_name(target));
  out.record = now.record;
  PROGCACHE_ASSIGN_OR_RETURN(auto held, read_entry(store, now.key, &out.detail));
  if (held && detail::entry_serves(*held, now.key, target)) {
    out.outcome = Explanation::Outcome::hit;
    return out;
  }
  if (held) out.detail = "the entry does not hold a " + out.target + " as this key promises";
  out.outcome = out.detail.empty() ? Explanation::Outcome::miss : Explanation::Outcome::damaged;

  PROGCACHE_ASSIGN_OR_RETURN(auto listed, store.list());
  std::vector<FileEntryInfo> same;
  for (auto& info : listed) {
    if (info.name == program.name && info.key != now.key) same.push_back(std::move(info));
  }
  out.same_name = same.size();
  std::sort(same.begin(), same.end(),
            [](const FileEntryInfo& a, const FileEntryInfo& b) { return a.created_unix_ns > b.created_unix_ns; });
  if (same.size() > k_max_candidates) same.resize(k_max_candidates);
  std::optional<std::size_t> best;
  for (const auto& info : same) {
    std::string damage;
    auto entry = read_entry(store, info.key, &damage);
    if (!entry.ok() || !entry->has_value()) continue;  // gone or damaged since the listing: not a candidate
    const std::string record = record_of(**entry);
    if (record.empty()) {
      ++out.without_record;
      continue;
    }
    auto diffs = detail::compare_key_records(record, now.record);
    if (!diffs.ok()) {
      ++out.without_record;  // a record this version cannot read
      continue;
    }
    // The newest wins a tie: candidates come newest first.
    if (!best || diffs->size() < *best) {
      best = diffs->size();
      out.nearest = info.key;
      out.differences = std::move(*diffs);
    }
  }
  return out;
}

Result<Explanation> explain_key(const Key& key, FileStore& store) {
  Explanation out;
  out.key = key;
  PROGCACHE_ASSIGN_OR_RETURN(auto held, read_entry(store, key, &out.detail));
  if (!held) {
    out.outcome = out.detail.empty() ? Explanation::Outcome::miss : Explanation::Outcome::damaged;
    return out;
  }
  out.outcome = Explanation::Outcome::hit;
  out.program_name = meta_string(*held, "name");
  out.target = meta_string(*held, "kind");
  out.record = record_of(*held);
  return out;
}

}  // namespace progcache
