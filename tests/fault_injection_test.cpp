// Every filesystem call on the put, get, evict and sweep paths of the file
// store fails in turn (ENOSPC, EIO, EACCES, EROFS, EMFILE; short writes),
// through the Env seam. For each (call, errno):
//   * each operation returns a clear status or succeeds; none returns wrong data;
//   * no temp file is left behind (once the failing unlink itself is healed,
//     the sweep removes what it could not);
//   * no committed entry is lost or damaged;
//   * a compile through the faulty cache still returns its object code.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "testing/fault_env.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::FaultEnv;
using testing::make_key;
using testing::Op;

struct Case {
  Op op;
  int err;
  bool short_write = false;
};

std::string payload(int i, int version) {
  return "entry " + std::to_string(i) + " v" + std::to_string(version) + std::string(500 + i, 'x');
}

std::size_t temps(const std::string& root) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".tmp.") || name.starts_with(".q.")) ++n;
  }
  return n;
}

bool have_nvrtc() {
  auto info = compiler_info();
  return info.ok() && !info->nvrtc_path.empty();
}

class FaultMatrix : public ::testing::TestWithParam<Case> {
 protected:
  testing::TempDir m_tmp;
};

TEST_P(FaultMatrix, ClearStatusNoTempsNothingCommittedLost) {
  const Case c = GetParam();
  FaultEnv env;
  const std::string root = m_tmp.sub("cache");
  auto opened = FileStore::open({.root = root,
                                 .max_size_bytes = std::nullopt,
                                 .max_entries = 12,
                                 .durability = Durability::fsync,
                                 .env = &env,
                                 .recency_granularity_ns = 0});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  auto& s = *opened;
  // Committed before any fault: keys 0..9 at version 1.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->put_bytes(make_key(i), Bytes::copy_of(payload(i, 1))).ok());
  // What each key may legitimately hold afterwards.
  std::map<int, std::set<std::string>> allowed;
  for (int i = 0; i < 10; ++i) allowed[i] = {payload(i, 1)};

  env.fail(c.op, c.err, 0, /*sticky=*/true, c.short_write);
  auto check_status = [&](const Status& st) {
    if (!st.ok()) {
      EXPECT_FALSE(st.message().empty());
      EXPECT_NE(st.code(), Code::ok);
    }
  };
  // put path: new keys and replacements.
  std::set<int> committed;  // keys some put of which returned ok
  for (int i = 0; i < 10; ++i) committed.insert(i);
  for (int i = 10; i < 14; ++i) {
    const Status st = s->put_bytes(make_key(i), Bytes::copy_of(payload(i, 1)));
    check_status(st);
    if (st.ok()) committed.insert(i);
    allowed[i] = {payload(i, 1)};
  }
  // Replacements of keys the trim above keeps (it evicts the least
  // recently used: keys 0, 1, 2), so the replacing path runs.
  for (int i = 7; i < 10; ++i) {
    const Status st = s->put_bytes(make_key(i), Bytes::copy_of(payload(i, 2)));
    check_status(st);
    allowed[i].insert(payload(i, 2));
  }
  // get path: never wrong data.
  for (int i = 0; i < 14; ++i) {
    auto g = s->get_bytes(make_key(i));
    check_status(g.status());
    if (g.ok() && g->has_value()) {
      EXPECT_TRUE(allowed[i].count((*g)->str())) << "key " << i << " read wrong data";
    }
  }
  // evict path (the puts above went over the 12-entry cap) and sweep path.
  auto v = s->verify(Repair::yes);
  check_status(v.status());
  // A compile through the faulty cache still returns its object code.
  if (have_nvrtc()) {
    Program p;
    p.code = "__global__ void k(int* x) { x[0] = " + std::to_string(static_cast<int>(c.op) * 100 + c.err) + "; }";
    p.options = {"-arch=sm_80"};
    auto r = compile(p, TargetType::cubin, {.cache = s.get(), .state_dir = m_tmp.sub("state")});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->code.view().substr(0, 4),
              "\x7f"
              "ELF");
  }
  EXPECT_GE(env.fired(), 1u) << "the fault never fired: the matrix does not reach " << testing::op_name(c.op);

  env.clear_faults();
  if (c.op != Op::unlink) {
    EXPECT_EQ(temps(root), 0u) << "a failed operation left a temp file";
  }
  // Healed: sweep what a failing unlink could not remove, then check every
  // surviving entry is intact and holds one of the values it may hold.
  auto healed = FileStore::open({.root = root, .max_size_bytes = std::nullopt, .max_entries = 12, .stale_temp_ns = 0});
  ASSERT_TRUE(healed.ok());
  auto report = (*healed)->verify(Repair::no);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(temps(root), 0u);
  std::set<int> present;
  for (int i = 0; i < 14; ++i) {
    auto g = (*healed)->get_bytes(make_key(i));
    ASSERT_TRUE(g.ok());
    if (!g->has_value()) continue;
    present.insert(i);
    EXPECT_TRUE(allowed[i].count((*g)->str())) << "key " << i << " holds wrong data";
  }
  // Every committed entry is still there, or an eviction (counted) removed
  // it: nothing is lost that eviction does not explain, entry by entry.
  std::size_t lost = 0;
  for (int i : committed) lost += present.count(i) == 0 ? 1 : 0;
  EXPECT_LE(lost, s->stats().evictions) << "committed entries lost beyond what eviction explains";
  // And eviction stops at the low-water mark of the 12-entry cap.
  EXPECT_GE(present.size(), 10u);
  // The accounting agrees with the files on disk once healed (the compile
  // above may have stored its program too).
  auto listed = (*healed)->list();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*(*healed)->count(), listed->size());
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  const std::vector<Op> ops = {Op::open_create,      Op::write,     Op::fsync,           Op::close,
                               Op::rename_noreplace, Op::rename,    Op::rename_exchange, Op::fsync_dir,
                               Op::fchmod,           Op::open_read, Op::fstat,           Op::pread,
                               Op::set_atime,        Op::list_dir,  Op::lstat,           Op::unlink};
  for (Op op : ops) {
    for (int err : {ENOSPC, EIO, EACCES, EROFS, EMFILE}) out.push_back({op, err});
  }
  out.push_back({Op::write, ENOSPC, true});
  out.push_back({Op::write, EIO, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllCalls, FaultMatrix, ::testing::ValuesIn(all_cases()), [](const auto& param_info) {
  const Case& c = param_info.param;
  const char* e = c.err == ENOSPC   ? "ENOSPC"
                  : c.err == EIO    ? "EIO"
                  : c.err == EACCES ? "EACCES"
                  : c.err == EROFS  ? "EROFS"
                                    : "EMFILE";
  return std::string(testing::op_name(c.op)) + "_" + e + (c.short_write ? "_short" : "");
});

}  // namespace
}  // namespace progcache
