// Errors as values: a Result holds either a T or an Error (a kind, errno, and one sentence of
// context). Context is added once, at the edge that knows the thing's name (with_context).
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace stagehand {

// What kind of failure, so callers decide without testing errno values.
enum class ErrorKind {
  refused,  // the request is not allowed or makes no sense (bad name, hostile entry, no permission)
  limit,    // a configured or built-in limit was reached (max_bytes, entries, sizes)
  corrupt,  // the data is not what it claims to be (a truncated or damaged archive)
  io,       // the system said no (ENOSPC, EIO, ENOENT on something that was there)
  config,   // the admin's configuration is unusable
  internal, // a bug or an impossible state
};

inline constexpr ErrorKind k_error_kinds[] = {ErrorKind::refused, ErrorKind::limit, ErrorKind::corrupt,
                                              ErrorKind::io,      ErrorKind::config, ErrorKind::internal};

// "refused", "limit", ...: the kind's name in messages and on the wire; and back.
const char* kind_name(ErrorKind kind);
std::optional<ErrorKind> kind_from_name(std::string_view name);

struct Error
{
  ErrorKind kind = ErrorKind::internal;
  int code = 0;        // errno value, or 0 when the error is not a system error
  std::string message; // names the thing and the reason, without a "stagehand:" prefix

  // A system call failed: kind io, message "what: strerror(err)".
  static Error from_errno(std::string what, int err = errno);
  static Error refused(std::string what, int err = 0) { return Error{ErrorKind::refused, err, std::move(what)}; }
  static Error limit(std::string what) { return Error{ErrorKind::limit, EFBIG, std::move(what)}; }
  static Error corrupt(std::string what) { return Error{ErrorKind::corrupt, EBADMSG, std::move(what)}; }
  static Error config(std::string what) { return Error{ErrorKind::config, EINVAL, std::move(what)}; }
  static Error internal(std::string what) { return Error{ErrorKind::internal, 0, std::move(what)}; }
  static Error io(std::string what, int err) { return Error{ErrorKind::io, err, std::move(what)}; }

  // The same error with "prefix: " in front of the message, unless it already starts with it.
  Error with_context(std::string_view prefix) const;
};

template<typename T> class [[nodiscard]] Result
{
public:
  Result(T value) : m_v(std::move(value)) {}
  Result(Error error) : m_v(std::move(error)) {}

  bool ok() const { return std::holds_alternative<T>(m_v); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(m_v); }
  const T& value() const& { return std::get<T>(m_v); }
  T&& value() && { return std::get<T>(std::move(m_v)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(m_v); }
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

private:
  std::variant<T, Error> m_v;
};

struct Unit
{
};

// Result of an operation that yields nothing but success or an Error.
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

} // namespace stagehand
