// progcache/status.h — the one error vocabulary of progcache.
//
// Every fallible function returns `Status` (no value) or `Result<T>` (a value
// or a Status). A cache miss is never an error: lookups return
// `Result<std::optional<T>>` and a miss is `std::nullopt`.
//
// Thread safety: Status and Result are plain values; distinct objects may be
// used from distinct threads freely.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace progcache {

// Canonical codes, in the spirit of abseil's. The numeric values are stable
// (they are exposed to Python and printed in JSON).
enum class Code : int {
  ok = 0,
  invalid_argument = 1,     // the caller passed something unusable
  not_found = 2,            // a thing that must exist does not (a miss is NOT this)
  data_loss = 3,            // stored bytes are damaged, truncated or foreign
  unavailable = 4,          // a resource (remote, compiler library) cannot be reached
  deadline_exceeded = 5,    // a timeout passed
  permission_denied = 6,    // the OS or a policy (foreign-owned root) refused
  resource_exhausted = 7,   // disk full, too many files, over a quota
  compile_error = 8,        // the compiler rejected the program (log attached)
  internal = 9,             // a bug or an OS failure with no better code
  failed_precondition = 10  // the system is not in a state that allows this
};

// Returns the snake_case name of `code` ("data_loss", ...).
std::string_view code_name(Code code) noexcept;

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(Code code, std::string message) : m_code(code), m_message(std::move(message)) {}

  static Status ok_status() noexcept { return Status(); }

  [[nodiscard]] bool ok() const noexcept { return m_code == Code::ok; }
  [[nodiscard]] Code code() const noexcept { return m_code; }
  [[nodiscard]] const std::string& message() const noexcept { return m_message; }
  // "data_loss: entry ab12…: checksum mismatch"; "ok" for success.
  [[nodiscard]] std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>".
  [[nodiscard]] Status with_context(std::string_view context) const;

  // Marks a status as deliberately unused.
  void ignore() const noexcept {}

 private:
  Code m_code = Code::ok;
  std::string m_message;
};

// Converts an errno value into the canonical code (ENOSPC → resource_exhausted,
// EACCES → permission_denied, ...) with a message naming `what` and `path`.
// This is the one place errno is interpreted.
Status errno_status(int err, std::string_view what, std::string_view path = {});

inline Status invalid_argument(std::string msg) {
  return {Code::invalid_argument, std::move(msg)};
}
inline Status data_loss(std::string msg) {
  return {Code::data_loss, std::move(msg)};
}
inline Status not_found(std::string msg) {
  return {Code::not_found, std::move(msg)};
}
inline Status internal_error(std::string msg) {
  return {Code::internal, std::move(msg)};
}
inline Status permission_denied(std::string msg) {
  return {Code::permission_denied, std::move(msg)};
}
inline Status unavailable(std::string msg) {
  return {Code::unavailable, std::move(msg)};
}
inline Status failed_precondition(std::string msg) {
  return {Code::failed_precondition, std::move(msg)};
}
inline Status deadline_exceeded(std::string msg) {
  return {Code::deadline_exceeded, std::move(msg)};
}
inline Status resource_exhausted(std::string msg) {
  return {Code::resource_exhausted, std::move(msg)};
}
inline Status compile_error(std::string msg) {
  return {Code::compile_error, std::move(msg)};
}

// A value of type T, or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_value(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : m_value(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(m_value).ok()) {
      m_value = Status(Code::internal, "Result constructed from an ok Status without a value");
    }
  }

  [[nodiscard]] bool ok() const noexcept { return std::holds_alternative<T>(m_value); }
  // The error; an ok Status when a value is held.
  [[nodiscard]] Status status() const { return ok() ? Status() : std::get<Status>(m_value); }

  // Requires ok().
  T& value() & { return std::get<T>(m_value); }
  const T& value() const& { return std::get<T>(m_value); }
  T&& value() && { return std::get<T>(std::move(m_value)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> m_value;
};

namespace detail {
inline Status to_status(const Status& s) {
  return s;
}
template <typename T>
Status to_status(const Result<T>& r) {
  return r.status();
}
}  // namespace detail

}  // namespace progcache

#define PROGCACHE_CONCAT_INNER(a, b) a##b
#define PROGCACHE_CONCAT(a, b) PROGCACHE_CONCAT_INNER(a, b)

// Evaluates `expr` (a Status or Result) and returns its Status on failure.
#define PROGCACHE_TRY(expr) PROGCACHE_TRY_IMPL(PROGCACHE_CONCAT(progcache_try_, __LINE__), expr)
#define PROGCACHE_TRY_IMPL(tmp, expr)             \
  do {                                            \
    auto&& tmp = (expr);                          \
    if (!tmp.ok()) {                              \
      return ::progcache::detail::to_status(tmp); \
    }                                             \
  } while (false)

// `PROGCACHE_ASSIGN_OR_RETURN(auto x, f());` — declares x from a Result or
// returns its Status.
#define PROGCACHE_ASSIGN_OR_RETURN(lhs, expr) \
  PROGCACHE_ASSIGN_OR_RETURN_IMPL(PROGCACHE_CONCAT(progcache_result_, __LINE__), lhs, expr)
#define PROGCACHE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
