#include "progcache/status.h"

#include <cstring>

namespace progcache {

std::string_view code_name(Code code) noexcept {
  switch (code) {
    case Code::ok:
      return "ok";
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_found:
      return "not_found";
    case Code::data_loss:
      return "data_loss";
    case Code::unavailable:
      return "unavailable";
    case Code::deadline_exceeded:
      return "deadline_exceeded";
    case Code::permission_denied:
      return "permission_denied";
    case Code::resource_exhausted:
      return "resource_exhausted";
    case Code::compile_error:
      return "compile_error";
    case Code::internal:
      return "internal";
    case Code::failed_precondition:
      return "failed_precondition";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out(code_name(m_code));
  out += ": ";
  out += m_message;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += m_message;
  return {m_code, std::move(msg)};
}

Status errno_status(int err, std::string_view what, std::string_view path) {
  Code code = Code::internal;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = Code::not_found;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = Code::permission_denied;
      break;
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EFBIG:
      code = Code::resource_exhausted;
      break;
    case EINVAL:
    case ENAMETOOLONG:
      code = Code::invalid_argument;
      break;
    // A symlink met where O_NOFOLLOW forbids one: the state of the
    // filesystem, not a bad argument.
    case ELOOP:
      code = Code::failed_precondition;
      break;
    case ETIMEDOUT:
      code = Code::deadline_exceeded;
      break;
    case EAGAIN:
    case EBUSY:
    case EINTR:
      code = Code::unavailable;
      break;
    default:
      break;
  }
  std::string msg(what);
  if (!path.empty()) {
    msg += " '";
    msg += path;
    msg += "'";
  }
  msg += ": ";
  msg += std::strerror(err);
  return {code, std::move(msg)};
}

}  // namespace progcache
