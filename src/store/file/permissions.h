// store/file/permissions.h — who may own and write the directories a file
// store trusts. A cache whose files another user can replace serves that
// user's programs, so the root, every directory above it and every shard
// are judged before use (see docs/file-store.md, "Permissions").
//
//   Sharing::private_only: directories 0700 and files 0600, owned by this
//     user; nothing on the way to the root writable by group or others
//     unless sticky (as /tmp), nor owned by anyone but this user or root.
//   Sharing::group: directories 2770 and files 0660; only "others" writing
//     is refused.
//
// Thread safety: all methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "progcache/env.h"
#include "progcache/file_store.h"

namespace progcache::file_store {

class DirPolicy {
 public:
  DirPolicy(Env* env, Sharing sharing);

  [[nodiscard]] std::uint32_t dir_perms() const { return m_dir_perms; }
  [[nodiscard]] std::uint32_t file_perms() const { return m_file_perms; }
  // A directory the store may use: a real directory (never a symlink) that
  // the sharing mode accepts.
  [[nodiscard]] bool acceptable(const FileInfo& info) const;
  // Creates `dir` (one level) with the store's permissions, or checks the
  // existing one; permission_denied when it is unacceptable.
  [[nodiscard]] Status ensure_dir(const std::string& dir) const;
  // Creates the missing components of `root`, then judges the root (which
  // may be a symlink the user chose: its target is judged) and every
  // directory above it. permission_denied saying what to do.
  [[nodiscard]] Status check_root(const std::string& root) const;

 private:
  [[nodiscard]] Status check_ancestors(const std::string& root) const;

  Env* m_env;
  Sharing m_sharing;
  std::uint32_t m_dir_perms;
  std::uint32_t m_file_perms;
};

}  // namespace progcache::file_store
