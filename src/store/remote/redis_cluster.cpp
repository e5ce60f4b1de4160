#include "store/remote/redis_cluster.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "store/remote/url_parts.h"
#include "util/mutex.h"

namespace progcache::redis {

// ---------------------------------------------------------------- slots

namespace {

// CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0, no
// reflection): the checksum the Redis Cluster specification names.
constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[i] = crc;
  }
  return t;
}
constexpr auto k_crc16 = make_crc16_table();

std::uint16_t crc16(std::string_view s) {
  std::uint16_t crc = 0;
  for (unsigned char c : s) crc = static_cast<std::uint16_t>((crc << 8) ^ k_crc16[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & (k_slots - 1);
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    error.remove_prefix(4);
    r.ask = true;
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::int64_t slot = 0;
  if (!remote_url::parse_int(error.substr(0, space), &slot) || slot < 0 || slot >= k_slots) return std::nullopt;
  r.slot = static_cast<int>(slot);
  const std::string_view addr = error.substr(space + 1);
  const auto colon = addr.rfind(':');
  std::int64_t port = 0;
  if (colon == std::string_view::npos || !remote_url::parse_int(addr.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return std::nullopt;
  }
  std::string_view host = addr.substr(0, colon);
  if (host.starts_with("[") && host.ends_with("]")) host = host.substr(1, host.size() - 2);
  if (host.empty()) return std::nullopt;
  r.to = {std::string(host), static_cast<int>(port)};
  return r;
}

Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const RedisEndpoint& asked) {
  const auto bad = [&](const std::string& why) {
    return data_loss("CLUSTER SLOTS reply of " + asked.shown() + ": " + why);
  };
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return bad("not an array");
  // A node: [host, port, id, ...]; nullopt when its endpoint is unknown.
  const auto node = [&](const redisReply* n) -> Result<std::optional<RedisEndpoint>> {
    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || n->element[0]->type != REDIS_REPLY_STRING ||
        n->element[1]->type != REDIS_REPLY_INTEGER || n->element[1]->integer <= 0 || n->element[1]->integer > 65535) {
      return bad("a node is not [host, port, ...]");
    }
    std::string host(n->element[0]->str, n->element[0]->len);
    if (host == "?") return std::optional<RedisEndpoint>();
    if (host.empty()) host = asked.host;
    return std::optional<RedisEndpoint>(RedisEndpoint{std::move(host), static_cast<int>(n->element[1]->integer)});
  };
  std::vector<SlotRange> out;
  for (std::size_t i = 0; i < reply->elements; ++i) {
    const redisReply* e = reply->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER) {
      return bad("a range is not [first, last, primary, replicas...]");
    }
    SlotRange r;
    r.first = static_cast<int>(e->element[0]->integer);
    r.last = static_cast<int>(e->element[1]->integer);
    if (e->element[0]->integer < 0 || r.last >= k_slots || r.first > r.last) return bad("a range out of 0-16383");
    PROGCACHE_ASSIGN_OR_RETURN(auto primary, node(e->element[2]));
    if (!primary) continue;
    r.primary = std::move(*primary);
    for (std::size_t j = 3; j < e->elements; ++j) {
      PROGCACHE_ASSIGN_OR_RETURN(auto replica, node(e->element[j]));
      if (replica) r.replicas.push_back(std::move(*replica));
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

bool same(const RedisEndpoint& a, const RedisEndpoint& b) {
  return a.host == b.host && a.port == b.port;
}

int index_of(std::vector<RedisEndpoint>& v, const RedisEndpoint& e) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (same(v[i], e)) return static_cast<int>(i);
  }
  v.push_back(e);
  return static_cast<int>(v.size() - 1);
}

}  // namespace

SlotMap SlotMap::from(const std::vector<SlotRange>& ranges) {
  SlotMap m;
  m.owner.fill(-1);
  for (const SlotRange& r : ranges) {
    const int p = index_of(m.primaries, r.primary);
    m.replicas.resize(m.primaries.size());
    for (const auto& rep : r.replicas) {
      if (std::none_of(m.replicas[p].begin(), m.replicas[p].end(), [&](const auto& x) { return same(x, rep); }))
        m.replicas[p].push_back(rep);
    }
    for (int s = r.first; s <= r.last; ++s) m.owner[s] = static_cast<std::int16_t>(p);
  }
  return m;
}

SlotMap SlotMap::moved(int slot, const RedisEndpoint& to) const {
  SlotMap m = *this;
  const int p = index_of(m.primaries, to);
  m.replicas.resize(m.primaries.size());
  m.owner[slot] = static_cast<std::int16_t>(p);
  return m;
}

int SlotMap::covered() const {
  return static_cast<int>(std::count_if(owner.begin(), owner.end(), [](std::int16_t o) { return o >= 0; }));
}

// ---------------------------------------------------------------- backend

namespace {

// Redirections one call follows before it gives up: a slot mid-migration
// takes two (MOVED to the old owner's successor, ASK), a failover one more.
constexpr int k_max_redirects = 5;
// The slot map is learnt again at most this often.
constexpr auto k_refresh_interval = std::chrono::milliseconds(100);

class ClusterBackend final : public KeyedBackend {
 public:
  ClusterBackend(const RedisUrl& url, const RedisBackendOptions& o)
      : KeyedBackend(url.prefix, url.ttl_seconds, url.redacted(), url.timeout), m_url(url), m_opt(o) {}

  Result<std::string> scan(std::string_view cursor, std::vector<std::string>* names, RemoteDeadline deadline) override {
    // The cursor is "<primary>:<its cursor>", primaries in the order of
    // their addresses in the current map.
    std::size_t index = 0;
    std::string_view node_cursor = "0";
    if (!cursor.empty()) {
      const auto colon = cursor.find(':');
      std::int64_t i = 0;
      if (colon == std::string_view::npos || !remote_url::parse_int(cursor.substr(0, colon), &i) || i < 0) {
        return invalid_argument("remote " + id() + ": bad scan cursor");
      }
      index = static_cast<std::size_t>(i);
      node_cursor = cursor.substr(colon + 1);
    }
    PROGCACHE_ASSIGN_OR_RETURN(std::shared_ptr<const SlotMap> map, current_map(deadline));
    std::vector<RedisEndpoint> primaries;
    for (std::size_t p = 0; p < map->primaries.size(); ++p) {
      if (std::find(map->owner.begin(), map->owner.end(), static_cast<std::int16_t>(p)) != map->owner.end())
        primaries.push_back(map->primaries[p]);
    }
    std::sort(primaries.begin(), primaries.end(), [](const auto& a, const auto& b) { return a.shown() < b.shown(); });
    if (index >= primaries.size()) return std::string();
    PROGCACHE_ASSIGN_OR_RETURN(std::string next, scan_node(node(primaries[index]), node_cursor, names, deadline));
    if (next != "0") return std::to_string(index) + ":" + next;
    return index + 1 < primaries.size() ? std::to_string(index + 1) + ":0" : std::string();
  }

 private:
  Result<Reply> call(std::string_view rkey, const std::vector<std::string_view>& args, bool read,
                     RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(std::shared_ptr<const SlotMap> map, current_map(deadline));
    const int slot = key_slot(rkey);
    std::optional<RedisEndpoint> target = owner(*map, slot, read);
    bool replica = target && !is_primary(*map, slot, *target);
    if (!target) {
      // Nobody serves the slot in the map we have: learn it again, once.
      (void)refresh(deadline, false);
      map = snapshot();
      if (map != nullptr) target = owner(*map, slot, false);
      if (!target) {
        return unavailable("remote " + id() + ": no node of the cluster serves hash slot " + std::to_string(slot) +
                           " (is the cluster down?)");
      }
    }
    bool asking = false;
    for (int hop = 0;; ++hop) {
      Reply reply;
      Status st = node(*target).with_connection(deadline, [&](Conn& c) -> Status {
        if (asking) {
          PROGCACHE_ASSIGN_OR_RETURN(Reply ok, c.exec({"ASKING"}));
          if (ok.is_error()) return refused(node(*target).shown(), "ASKING", ok);
        }
        PROGCACHE_ASSIGN_OR_RETURN(reply, c.exec(args));
        return {};
      });
      if (!st.ok()) {
        if (replica) {  // a replica that does not answer: its primary serves the read
          replica = false;
          map = snapshot();
          target = owner(*map, slot, false);
          if (target) continue;
        }
        // A node that does not answer may have failed over: learn the map
        // again and, when it names another owner, try there, once.
        want_refresh();
        if (hop == 0 && refresh(deadline, false).ok()) {
          auto fresh = snapshot();
          auto again = fresh == nullptr ? std::nullopt : owner(*fresh, slot, false);
          if (again && !same(*again, *target)) {
            target = again;
            replica = false;
            asking = false;
            continue;
          }
        }
        return st;
      }
      if (reply.is_error()) {
        if (auto r = parse_redirect(reply.text())) {
          if (hop >= k_max_redirects) {
            return unavailable("remote " + id() + ": " + std::string(args.front()) + " redirected " +
                               std::to_string(hop + 1) + " times (last: " + std::string(reply.text()) +
                               "): the cluster's slot map does not settle");
          }
          if (!r->ask) note_moved(r->slot, r->to);
          target = r->to;
          asking = r->ask;
          replica = false;
          continue;
        }
        if (reply.text().starts_with("CLUSTERDOWN") || reply.text().starts_with("TRYAGAIN")) want_refresh();
      }
      return reply;
    }
  }

  // Who serves `slot`: a replica for a read when asked to read from them
  // (turn by turn), else the primary.
  std::optional<RedisEndpoint> owner(const SlotMap& map, int slot, bool read) {
    const int p = map.owner[slot];
    if (p < 0) return std::nullopt;
    const auto& replicas = map.replicas[p];
    if (read && m_url.read_from_replicas && !replicas.empty()) {
      return replicas[m_turn.fetch_add(1, std::memory_order_relaxed) % replicas.size()];
    }
    return map.primaries[p];
  }
  static bool is_primary(const SlotMap& map, int slot, const RedisEndpoint& e) {
    const int p = map.owner[slot];
    return p >= 0 && same(map.primaries[p], e);
  }

  Node& node(const RedisEndpoint& e) {
    const std::string at = e.shown();
    MutexLock l(m_nodes_mu);
    auto& n = m_nodes[at];
    if (n == nullptr) {
      NodeOptions o = node_options(m_url, e.host, e.port, m_opt);
      o.readonly = m_url.read_from_replicas;
      o.shown = "redis+cluster node " + at;
      n = std::make_unique<Node>(std::move(o));
    }
    return *n;
  }

  std::shared_ptr<const SlotMap> snapshot() {
    MutexLock l(m_map_mu);
    return m_map;
  }

  void want_refresh() { m_refresh_wanted.store(true, std::memory_order_relaxed); }

  void note_moved(int slot, const RedisEndpoint& to) {
    {
      MutexLock l(m_map_mu);
      if (m_map != nullptr) m_map = std::make_shared<const SlotMap>(m_map->moved(slot, to));
    }
    // One slot moved: most likely others did too (a reshard, a failover).
    want_refresh();
  }

  // The map to route by: learnt first when there is none yet (waiting for a
  // thread that is learning it), learnt again when a call asked for it.
  Result<std::shared_ptr<const SlotMap>> current_map(RemoteDeadline deadline) {
    auto map = snapshot();
    if (map == nullptr) {
      PROGCACHE_TRY(refresh(deadline, true));
      map = snapshot();
      if (map == nullptr) return unavailable("remote " + id() + ": the cluster's slot map is not known yet");
    } else if (m_refresh_wanted.load(std::memory_order_relaxed)) {
      (void)refresh(deadline, false);
      map = snapshot();
    }
    return map;
  }

  // Learns the slot map from the first node that answers CLUSTER SLOTS: the
  // primaries and replicas of the map known, then the seeds. One thread at a
  // time, at most once per k_refresh_interval; `wait` waits (within the
  // deadline) for a thread already at it instead of returning at once.
  Status refresh(RemoteDeadline deadline, bool wait) {
    // Polled rather than std::timed_mutex: its timed lock is
    // pthread_mutex_clocklock, which ThreadSanitizer does not follow (it
    // then reports the unlock as one of an unlocked mutex). Waiting happens
    // only before a map is known, once per backend.
    std::unique_lock<std::mutex> lk(m_refresh_mu, std::try_to_lock);
    while (!lk.owns_lock()) {
      if (!wait) return {};
      if (RemoteClock::now() >= deadline) {
        return deadline_exceeded("remote " + id() + ": no slot map within the deadline");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      (void)lk.try_lock();
    }
    const auto now = RemoteClock::now();
    auto map = snapshot();
    if (map != nullptr && now - m_last_refresh < k_refresh_interval) return {};
    m_last_refresh = now;
    m_refresh_wanted.store(false, std::memory_order_relaxed);
    std::vector<RedisEndpoint> candidates;
    const auto add = [&](const RedisEndpoint& e) {
      if (std::none_of(candidates.begin(), candidates.end(), [&](const auto& c) { return same(c, e); }))
        candidates.push_back(e);
    };
    if (map != nullptr) {
      for (const auto& p : map->primaries) add(p);
      for (const auto& rs : map->replicas)
        for (const auto& r : rs) add(r);
    }
    for (const auto& s : m_url.seeds) add(s);
    Status last = unavailable("no node to ask");
    for (const auto& c : candidates) {
      if (RemoteClock::now() >= deadline) {
        last = deadline_exceeded("no node answered CLUSTER SLOTS within the deadline");
        break;
      }
      auto r = node(c).exec({"CLUSTER", "SLOTS"}, deadline);
      if (!r.ok()) {
        last = r.status();
        continue;
      }
      if (r->is_error()) {
        last = refused(node(c).shown(), "CLUSTER SLOTS", *r);
        continue;
      }
      auto ranges = parse_cluster_slots(r->r, c);
      if (!ranges.ok()) {
        last = ranges.status();
        continue;
      }
      if (ranges->empty()) {
        last = unavailable(c.shown() + " serves no slot (is it a cluster node?)");
        continue;
      }
      auto fresh = std::make_shared<const SlotMap>(SlotMap::from(*ranges));
      MutexLock l(m_map_mu);
      m_map = std::move(fresh);
      return {};
    }
    if (map != nullptr) return {};  // keep routing by the map we have
    return Status(last.code() == Code::permission_denied ? Code::permission_denied : Code::unavailable,
                  "remote " + id() + ": no node of the cluster answered CLUSTER SLOTS (" + last.message() + ")");
  }

  const RedisUrl m_url;
  const RedisBackendOptions m_opt;
  Mutex m_nodes_mu;
  std::map<std::string, std::unique_ptr<Node>> m_nodes PROGCACHE_GUARDED_BY(m_nodes_mu);
  Mutex m_map_mu;
  std::shared_ptr<const SlotMap> m_map PROGCACHE_GUARDED_BY(m_map_mu);
  std::mutex m_refresh_mu;                   // held by the thread learning the map
  RemoteClock::time_point m_last_refresh{};  // guarded by m_refresh_mu
  std::atomic<bool> m_refresh_wanted{false};
  std::atomic<unsigned> m_turn{0};
};

}  // namespace

std::unique_ptr<RemoteBackend> make_cluster_backend(const RedisUrl& url, const RedisBackendOptions& options) {
  return std::make_unique<ClusterBackend>(url, options);
}

}  // namespace progcache::redis
