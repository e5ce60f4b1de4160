#include "store/file/permissions.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace progcache::file_store {

DirPolicy::DirPolicy(Env* env, Sharing sharing)
    : m_env(env),
      m_sharing(sharing),
      m_dir_perms(sharing == Sharing::group ? 02770 : 0700),
      m_file_perms(sharing == Sharing::group ? 0660 : 0600) {}

bool DirPolicy::acceptable(const FileInfo& info) const {
  if (info.is_symlink() || !info.is_dir()) return false;
  if (m_sharing == Sharing::private_only) return info.uid == ::geteuid() && (info.mode & 022) == 0;
  return (info.mode & 002) == 0;
}

Status DirPolicy::ensure_dir(const std::string& dir) const {
  Status st = m_env->mkdir(dir, m_dir_perms);
  if (st.ok()) {
    if (m_sharing == Sharing::group) PROGCACHE_TRY(m_env->chmod(dir, m_dir_perms));
  } else if (st.code() != Code::failed_precondition) {
    return st;
  }
  PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->lstat(dir));
  if (!acceptable(info)) {
    return permission_denied("'" + dir + "' is a symlink, not a directory, or not private to this user; refusing it");
  }
  return {};
}

Status DirPolicy::check_root(const std::string& root) const {
  // Create missing components, private by default (XDG asks 0700 for caches).
  std::filesystem::path p(root);
  std::filesystem::path acc;
  for (const auto& part : p) {
    acc /= part;
    if (acc == acc.root_path()) continue;
    Status st = m_env->mkdir(acc.string(), m_dir_perms);
    if (!st.ok() && st.code() != Code::failed_precondition) return st.with_context("creating cache root");
    if (st.ok() && m_sharing == Sharing::group && acc == p) PROGCACHE_TRY(m_env->chmod(acc.string(), m_dir_perms));
  }
  // The root itself may be a symlink the user chose; judge its target.
  PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->stat(root));
  if (!info.is_dir()) return failed_precondition("cache root '" + root + "' is not a directory");
  if (m_sharing == Sharing::private_only) {
    if (info.uid != ::geteuid()) {
      return permission_denied("cache root '" + root + "' is owned by uid " + std::to_string(info.uid) +
                               ", not by you (uid " + std::to_string(::geteuid()) +
                               "): someone else could plant programs there. Use a directory you own "
                               "(PROGCACHE_DIR) or configure group sharing explicitly");
    }
    if ((info.mode & 022) != 0) {
      return permission_denied("cache root '" + root +
                               "' is writable by group or others: anyone could plant programs there. "
                               "Run 'chmod 700' on it, or configure group sharing explicitly");
    }
  } else if ((info.mode & 002) != 0) {
    return permission_denied("cache root '" + root + "' is writable by others; refusing it even in group mode");
  }
  return check_ancestors(root);
}

// Whoever can rename the cache root, or any directory above it, can move it
// aside under a running process and put a tree of their own in its place.
// So, as OpenSSH's StrictModes does, every directory on the way to the root
// (as written and as resolved through symlinks) must be owned by root or by
// this user, and writable by nobody else unless it is sticky (as /tmp is:
// only an entry's owner may rename it there). Group mode trusts the group:
// it checks only that no ancestor is open to others.
Status DirPolicy::check_ancestors(const std::string& root) const {
  const std::uint32_t me = ::geteuid();
  const bool priv = m_sharing == Sharing::private_only;
  auto judge = [&](const std::filesystem::path& dir) -> Status {
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->stat(dir.string()));
    const bool sticky = (info.mode & S_ISVTX) != 0;
    const std::uint32_t foreign_write = priv ? 022 : 002;
    if ((info.mode & foreign_write) != 0 && !sticky) {
      return permission_denied("'" + dir.string() + "', above the cache root '" + root + "', is writable by " +
                               (priv ? "group or " : "") +
                               "others (and not sticky): they could move the root aside and plant programs. "
                               "Use a cache directory under one only you (or root) can write");
    }
    if (priv && info.uid != 0 && info.uid != me) {
      return permission_denied("'" + dir.string() + "', above the cache root '" + root + "', is owned by uid " +
                               std::to_string(info.uid) +
                               ": its owner could move the root aside and plant programs. Use a cache "
                               "directory under one only you (or root) own");
    }
    return {};
  };
  std::error_code ec;
  const std::filesystem::path written = std::filesystem::absolute(root, ec).lexically_normal();
  const std::filesystem::path resolved = std::filesystem::canonical(root, ec);
  // A symbolic link on the way (the root itself included) is only as good
  // as its owner, who can point it elsewhere at any time: /tmp/link aimed
  // at the user's own directory passes every check above and below, then
  // leads to the link owner's tree once the store trusts the path.
  if (priv) {
    for (auto d = written; !d.empty(); d = d.parent_path()) {
      auto info = m_env->lstat(d.string());
      if (info.ok() && info->is_symlink() && info->uid != 0 && info->uid != me) {
        return permission_denied("'" + d.string() + "', on the way to the cache root '" + root +
                                 "', is a symbolic link owned by uid " + std::to_string(info->uid) +
                                 ": its owner could point it at programs of theirs. Use a path without "
                                 "another user's links");
      }
      if (d == d.root_path()) break;
    }
  }
  for (const auto& chain : {written, ec ? written : resolved}) {
    for (auto d = chain.parent_path(); !d.empty(); d = d.parent_path()) {
      PROGCACHE_TRY(judge(d));
      if (d == d.root_path()) break;
    }
  }
  return {};
}

}  // namespace progcache::file_store
