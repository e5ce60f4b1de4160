// Redis Cluster as one backend of the remote tier: the routing layer over
// hiredis (which has no cluster support in Debian's build). The pieces that
// read the cluster's answers are here, apart, so that tests can feed them
// recorded replies.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/redis_backend.h"
#include "store/remote/redis_conn.h"

namespace progcache::redis {

constexpr int k_slots = 16384;

// The hash slot of a key, as the Redis Cluster specification defines it:
// CRC16 (XMODEM) of the key, or of its hash tag (the text between the first
// '{' and the first '}' after it, when not empty), modulo 16384.
std::uint16_t key_slot(std::string_view key);

// A MOVED or ASK error reply: "MOVED <slot> <host>:<port>".
struct Redirect {
  bool ask = false;
  int slot = 0;
  RedisEndpoint to;
};
// nullopt for any other text (or a malformed redirection).
std::optional<Redirect> parse_redirect(std::string_view error);

// One range of a CLUSTER SLOTS reply.
struct SlotRange {
  int first = 0, last = 0;
  RedisEndpoint primary;
  std::vector<RedisEndpoint> replicas;
};
// The ranges of a CLUSTER SLOTS reply. A node listed with an empty host is
// the node that answered (`asked`); one listed as "?" (endpoint unknown) is
// left out, and so is a range without a known primary. data_loss for a
// reply of another shape.
Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const RedisEndpoint& asked);

// Who serves each slot.
struct SlotMap {
  std::vector<RedisEndpoint> primaries;              // distinct
  std::vector<std::vector<RedisEndpoint>> replicas;  // of each primary
  std::array<std::int16_t, k_slots> owner{};         // index into primaries; -1: nobody
  static SlotMap from(const std::vector<SlotRange>& ranges);
  // The map with `slot` served by `to` (a MOVED).
  [[nodiscard]] SlotMap moved(int slot, const RedisEndpoint& to) const;
  [[nodiscard]] int covered() const;  // slots with an owner
};

// The connection settings of one node of `url`.
NodeOptions node_options(const RedisUrl& url, const std::string& host, int port, const RedisBackendOptions& o);

std::unique_ptr<RemoteBackend> make_cluster_backend(const RedisUrl& url, const RedisBackendOptions& options);

}  // namespace progcache::redis
