// Error type and check macros used everywhere in remat (STYLE.md: one family of checks).
// Every failed check throws remat::Error carrying the expression, a message and file:line;
// library code never exits. main() catches, prints one line, exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace remat {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A user-facing error: the message already names the file position or node, so main() prints
// it without the source location of the check.
class UserError : public Error {
 public:
  explicit UserError(const std::string& what) : Error(what) {}
};

// Training produced a NaN or an infinity (runtime/executor.h, Note [finite check]): the message
// names the step and the first node whose output is not finite. Tools exit with code 3.
class NonFiniteError : public UserError {
 public:
  explicit NonFiniteError(const std::string& what) : UserError(what) {}
};

namespace detail {
[[noreturn]] inline void throw_check(const char* expr, const std::string& msg, const char* file,
                                     int line) {
  std::ostringstream os;
  os << msg << (msg.empty() ? "" : " ") << "(";
  if (expr && *expr) os << "check `" << expr << "` failed at ";
  else os << "at ";
  os << file << ":" << line << ")";
  throw Error(os.str());
}
// Builds a message from stream-style arguments: REMAT_CHECK(x > 0, "x = " << x).
struct MessageBuilder {
  std::ostringstream os;
  template <typename T>
  MessageBuilder& operator<<(const T& v) {
    os << v;
    return *this;
  }
  std::string str() const { return os.str(); }
};
}  // namespace detail

}  // namespace remat

#define REMAT_STREAM_(msg) ((::remat::detail::MessageBuilder() << msg).str())

// Internal invariant / argument check. `msg` may use <<.
#define REMAT_CHECK(cond, msg)                                                         \
  do {                                                                                 \
    if (!(cond)) ::remat::detail::throw_check(#cond, REMAT_STREAM_(msg), __FILE__, __LINE__); \
  } while (0)

// Unconditional failure with a message.
#define REMAT_FAIL(msg) ::remat::detail::throw_check("", REMAT_STREAM_(msg), __FILE__, __LINE__)

// A user-input error: message names the file:line:col / layer / node.
#define REMAT_USER_ERROR(msg) throw ::remat::UserError(REMAT_STREAM_(msg))
