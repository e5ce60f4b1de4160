// nvcc/launcher_explain.cpp — `progcache explain nvcc ...`: whether the
// command would be served, and on a miss what differs. Runs nothing.
#include <sys/stat.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "nvcc/launcher_impl.h"
#include "nvcc/manifest.h"
#include "nvcc/relocation.h"
#include "progcache/file_store.h"
#include "progcache/key.h"
#include "progcache/status.h"
#include "store/file/layout.h"
#include "store/file/permissions.h"
#include "util/user_io.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
using cli::fail;
using cli::k_exit_error;
using cli::k_exit_miss;
using cli::k_exit_ok;
using cli::plain;
using cli::printable;

}  // namespace

int Launcher::explain() {
  const std::string key = "command key " + m_mkey.hex();
  const pc::file_store::Layout layout(m_store_options.root);
  if (struct stat st{}; ::stat(layout.dir().c_str(), &st) != 0) {
    return said(k_exit_miss, "miss (" + key + "): nothing of the launcher's is in '" + m_root + "'");
  }
  // The directories as the store judges them: one it would refuse is a
  // build without the cache (the root, its version directory) or a miss
  // (a shard).
  pc::Env* env = pc::Env::posix();
  const pc::file_store::DirPolicy dirs(env, m_store_options.sharing);
  if (auto st = dirs.check_root(layout.root()); !st.ok()) return fail(st);
  if (auto v = env->lstat(layout.dir()); !v.ok() || !dirs.acceptable(*v)) {
    return fail(pc::Status(pc::Code::permission_denied,
                           "'" + layout.dir() + "' is not a directory the store trusts: a build runs nvcc uncached"));
  }
  // An entry as a lookup would judge it, or why it is damaged; nothing
  // changed.
  const auto peek = [&](const pc::Key& k) { return pc::FileStore::peek(m_store_options, k); };
  auto got = peek(m_mkey);
  if (!got.ok()) {
    return said(k_exit_error, "damaged (" + key + "): the manifest's entry cannot be read (" + plain(got.status()) +
                                  "); a build drops it and compiles");
  }
  // Under a base directory, a result another checkout stored.
  const auto relocated_hit = [&]() -> std::optional<std::string> {
    if (!m_relocated_key || unwritable()) return std::nullopt;
    auto r = peek(*m_relocated_key);
    const pc::Artifact* rtext = r.ok() && r->has_value() ? (*r)->find("manifest") : nullptr;
    const auto rm = rtext != nullptr ? decode_manifest(rtext->data.view()) : std::nullopt;
    if (!rm) return std::nullopt;
    HoldingCheck holds(*rm);
    for (std::size_t i = 0; i < rm->results.size(); ++i) {
      if (holds.first_mismatch(i)) continue;
      auto pointer = peek(rm->results[i].result);
      const pc::Artifact* raw = pointer.ok() && pointer->has_value() ? (*pointer)->find("result") : nullptr;
      if (raw == nullptr) continue;
      auto rkey = pc::Key::from_raw(raw->data.view());
      if (!rkey.ok()) continue;
      auto entry = peek(*rkey);
      if (!entry.ok() || !entry->has_value() || (*entry)->find("output") == nullptr) continue;
      return "hit (relocated key " + m_relocated_key->hex() + ", stored from another checkout under " +
             printable(m_reloc->base) + ")";
    }
    return std::nullopt;
  };
  if (!got->has_value()) {
    if (auto hit = relocated_hit()) return said(k_exit_ok, *hit);
    return said(k_exit_miss, "miss (" + key +
                                 "): never stored with these options, this nvcc and host compiler, these "
                                 "variables" +
                                 std::string(m_place_keyed ? " and this directory" : "") + " (or evicted since)");
  }
  const pc::Artifact* text = (*got)->find("manifest");
  auto m = text == nullptr ? std::nullopt : decode_manifest(text->data.view());
  if (!m && text != nullptr && of_another_manifest_version(text->data.view())) {
    return said(k_exit_miss, "miss (" + key + "): the manifest is of another launcher's format; a build replaces it");
  }
  if (!m) return said(k_exit_error, "damaged (" + key + "): the manifest cannot be read; a build replaces it");
  HoldingCheck check(*m);
  std::vector<std::string> lines;
  const std::string of = " of " + std::to_string(m->results.size());
  for (std::size_t i = 0; i < m->results.size(); ++i) {
    const std::string label = "result " + std::to_string(i + 1) + of + ": ";
    if (const auto mm = check.first_mismatch(i)) {
      static constexpr const char* k_kinds[] = {"edited", "gone", "created earlier in the search",
                                                "changed (a place a probe found)"};
      lines.push_back(label + k_kinds[static_cast<int>(mm->kind)] + "  " + printable(mm->path));
      continue;
    }
    auto entry = peek(m->results[i].result);
    if (!entry.ok()) {
      lines.push_back(label + "every file as it was, but its output's entry is damaged (" + plain(entry.status()) +
                      ")");
      continue;
    }
    if (!entry->has_value() || (*entry)->find("output") == nullptr) {
      lines.push_back(label + "every file as it was, but its output is not in the store (evicted)");
      continue;
    }
    if (const auto why = unwritable()) {
      std::string line = "miss (" + key;
      line.append(", ").append(label).append("stored, but ").append(printable(*why));
      return said(k_exit_miss, line.append(": nvcc runs, and fails as it would without the launcher)"));
    }
    std::string line = "hit (" + key;
    line.append(", ").append(label).append(m->results[i].result.hex()).append(")");
    return said(k_exit_ok, line);
  }
  if (auto hit = relocated_hit()) return said(k_exit_ok, *hit);
  said(k_exit_miss, "miss (" + key + ")");
  for (const auto& l : lines) std::printf("  %s\n", l.c_str());
  if (m_toolkit_nvcc && !m_cmd.source_in_ptx) {
    std::printf("  (the preprocessed text is not computed here: a comment-only edit may still be served by it)\n");
  }
  return k_exit_miss;
}

int Launcher::said(int code, const std::string& what) const {
  std::printf("%s: %s\n", printable(m_cmd.input.empty() ? std::string("nvcc") : m_cmd.input).c_str(), what.c_str());
  std::fflush(stdout);
  return code;
}

}  // namespace progcache::nvcc
