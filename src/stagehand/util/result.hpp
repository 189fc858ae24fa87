// Errors as values: a Result holds either a T or an Error (errno plus a sentence of context).
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace stagehand {

struct Error
{
  int code = 0;        // errno value, or 0 when the error is not a system error
  std::string message; // names the thing and the reason, without a "stagehand:" prefix

  static Error from_errno(std::string what, int err = errno);
  static Error invalid(std::string what) { return Error{EINVAL, std::move(what)}; }
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
