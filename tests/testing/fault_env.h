// FaultEnv: an EnvWrapper over the real Env that fails chosen calls, for
// fault-injection tests (ENOSPC, EIO, EACCES, EROFS, EMFILE, short writes),
// and a settable clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "progcache/env.h"

namespace progcache::testing {

enum class Op {
  open_read,
  open_create,
  open_rw,
  close,
  pread,
  write,
  fsync,
  ftruncate,
  fstat,
  set_atime,
  fchmod,
  lstat,
  stat,
  rename,
  rename_noreplace,
  unlink,
  mkdir,
  chmod,
  list_dir,
  fsync_dir,
  lock,
  map_shared,
  allocate,
  rename_exchange,
  spread_subdirectories,
  count_
};
const char* op_name(Op op);

class FaultEnv final : public EnvWrapper {
 public:
  explicit FaultEnv(Env* base = Env::posix()) : EnvWrapper(base) {}

  // Fails the `nth` (0-based, counted from now) call of `op` with `err`;
  // with `sticky`, every call from then on. For Op::write, `short_write`
  // writes half the data before failing.
  void fail(Op op, int err, std::uint64_t nth = 0, bool sticky = false, bool short_write = false);
  void clear_faults();
  // How many times `op` ran since construction.
  std::uint64_t calls(Op op) const { return m_calls[static_cast<int>(op)].load(); }
  // How many faults fired.
  std::uint64_t fired() const { return m_fired.load(); }
  // Overrides the clock (nullopt: real time).
  void set_now(std::optional<std::int64_t> ns) { m_now = ns ? *ns : 0, m_fixed_clock = ns.has_value(); }

  Result<int> open_file(const std::string& path, OpenMode mode, std::uint32_t perms) override;
  Status close_file(int fd) override;
  Result<std::size_t> pread(int fd, char* buf, std::size_t n, std::uint64_t offset) override;
  // Counted and failed as Op::pread: one read, however many pieces.
  Result<std::size_t> preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) override;
  Status write_all(int fd, std::string_view data) override;
  Status fsync(int fd) override;
  Status ftruncate(int fd, std::uint64_t size) override;
  Status allocate(int fd, std::uint64_t size) override;
  Result<FileInfo> fstat(int fd) override;
  Status set_atime(int fd, std::int64_t atime_ns) override;
  Status fchmod(int fd, std::uint32_t perms) override;
  Result<FileInfo> lstat(const std::string& path) override;
  Result<FileInfo> stat(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status rename_exchange(const std::string& a, const std::string& b) override;
  Status unlink(const std::string& path) override;
  Status mkdir(const std::string& path, std::uint32_t perms) override;
  Status chmod(const std::string& path, std::uint32_t perms) override;
  Result<std::vector<DirEntry>> list_dir(const std::string& path) override;
  Status fsync_dir(const std::string& path) override;
  Status spread_subdirectories(const std::string& dir) override;
  Result<bool> lock(int fd, LockKind kind, LockWait wait) override;
  Result<void*> map_shared(int fd, std::size_t size) override;
  std::int64_t now_ns() override;

 private:
  // Returns the errno to fail with, or 0 to run the call.
  int check(Op op, bool* short_write = nullptr);

  struct Rule {
    bool active = false;
    int err = 0;
    std::uint64_t at = 0;  // absolute call index
    bool sticky = false;
    bool short_write = false;
  };
  std::mutex m_mu;
  Rule m_rules[static_cast<int>(Op::count_)];
  std::atomic<std::uint64_t> m_calls[static_cast<int>(Op::count_)] = {};
  std::atomic<std::uint64_t> m_fired{0};
  std::atomic<std::int64_t> m_now{0};
  std::atomic<bool> m_fixed_clock{false};
};

}  // namespace progcache::testing
