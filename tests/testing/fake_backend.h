// A remote backend held in memory, for testing the remote tier's policies
// (sharding, breaker, read-only, deadlines, stats) without a server. It also
// shows how small a backend is: five calls and an id.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "progcache/remote_store.h"

namespace progcache::testing {

class FakeBackend final : public RemoteBackend {
 public:
  enum class Mode {
    ok,
    down,         // every call: unavailable
    hang,         // every call waits out its deadline: deadline_exceeded
    refuse_auth,  // every call: permission_denied
    endless_scan  // scan never returns the end cursor
  };

  // State shared with the test, which keeps it after the store owns the
  // backend.
  struct State {
    std::mutex mu;
    std::map<std::string, std::string> data;
    Mode mode = Mode::ok;
    int calls = 0;  // calls that reached the backend
    // Time left to the deadline of the last call, as the call began.
    std::chrono::milliseconds last_budget{0};
  };

  FakeBackend(std::string id, std::shared_ptr<State> state,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(50))
      : m_id(std::move(id)), m_state(std::move(state)), m_timeout(timeout) {}

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override {
    std::unique_lock l(m_state->mu);
    PROGCACHE_TRY(enter(l, deadline));
    auto it = m_state->data.find(std::string(name));
    if (it == m_state->data.end()) return std::optional<Bytes>();
    return std::optional<Bytes>(Bytes::copy_of(it->second));
  }
  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override {
    std::unique_lock l(m_state->mu);
    PROGCACHE_TRY(enter(l, deadline));
    m_state->data[std::string(name)] = std::string(value);
    return {};
  }
  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override {
    std::unique_lock l(m_state->mu);
    PROGCACHE_TRY(enter(l, deadline));
    return m_state->data.erase(std::string(name)) > 0;
  }
  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override {
    std::unique_lock l(m_state->mu);
    PROGCACHE_TRY(enter(l, deadline));
    auto it = m_state->data.find(std::string(name));
    return it == m_state->data.end() ? 0 : it->second.size();
  }
  // Batches of two names; the cursor is the last name returned.
  Result<std::string> scan(std::string_view cursor, std::vector<std::string>* names, RemoteDeadline deadline) override {
    std::unique_lock l(m_state->mu);
    PROGCACHE_TRY(enter(l, deadline));
    if (m_state->mode == Mode::endless_scan) return std::string("again");
    auto it = cursor.empty() ? m_state->data.begin() : m_state->data.upper_bound(std::string(cursor));
    std::string last;
    for (int n = 0; n < 2 && it != m_state->data.end(); ++n, ++it) {
      names->push_back(it->first);
      last = it->first;
    }
    return it == m_state->data.end() ? std::string() : last;
  }
  [[nodiscard]] std::string id() const override { return m_id; }
  [[nodiscard]] std::chrono::milliseconds call_timeout() const override { return m_timeout; }

 private:
  Status enter(std::unique_lock<std::mutex>& l, RemoteDeadline deadline) {
    ++m_state->calls;
    m_state->last_budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RemoteClock::now());
    switch (m_state->mode) {
      case Mode::down:
        return unavailable("remote " + m_id + ": connection refused");
      case Mode::hang:
        l.unlock();
        std::this_thread::sleep_until(deadline);
        l.lock();
        return deadline_exceeded("remote " + m_id + ": no answer within the deadline");
      case Mode::refuse_auth:
        return permission_denied("remote " + m_id + ": authentication failed");
      default:
        return {};
    }
  }

  std::string m_id;
  std::shared_ptr<State> m_state;
  std::chrono::milliseconds m_timeout;
};

}  // namespace progcache::testing
