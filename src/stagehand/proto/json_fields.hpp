// Internal to the protocol's JSON mapping (messages.cpp: requests, replies.cpp: replies): field
// access that never throws and returns an error naming the field, and the pieces both sides share.
#pragma once

#include "stagehand/proto/frame.hpp"
#include "stagehand/proto/messages.hpp"

#include <nlohmann/json.hpp>

#include <limits>
#include <string>
#include <string_view>

namespace stagehand::proto::detail {

using nlohmann::json;

inline Error bad(const std::string& why) { return Error::refused("protocol: " + why); }

template<typename... Ts> struct Overloaded : Ts...
{
  using Ts::operator()...;
};
template<typename... Ts> Overloaded(Ts...) -> Overloaded<Ts...>;

// Typed field access that never throws: each returns an error naming the field.
class Fields
{
public:
  explicit Fields(const json& obj) : m_obj(obj) {}

  Result<std::uint64_t> u64(const char* key, std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const
  {
    auto it = m_obj.find(key);
    if (it == m_obj.end() || !it->is_number_unsigned()) {
      return bad(std::string("\"") + key + "\" must be a non-negative integer");
    }
    auto v = it->get<std::uint64_t>();
    if (v > max) {
      return bad(std::string("\"") + key + "\" is out of range");
    }
    return v;
  }
  Result<std::uint32_t> u32(const char* key) const
  {
    auto v = u64(key, std::numeric_limits<std::uint32_t>::max());
    if (!v) {
      return v.error();
    }
    return static_cast<std::uint32_t>(*v);
  }
  Result<std::int64_t> i64(const char* key) const
  {
    auto it = m_obj.find(key);
    if (it == m_obj.end() || !it->is_number_integer()) {
      return bad(std::string("\"") + key + "\" must be an integer");
    }
    return it->get<std::int64_t>();
  }
  Result<std::string> str(const char* key, bool allow_empty = false) const
  {
    auto it = m_obj.find(key);
    if (it == m_obj.end() || !it->is_string()) {
      return bad(std::string("\"") + key + "\" must be a string");
    }
    const auto& s = it->get_ref<const std::string&>();
    if ((!allow_empty && s.empty()) || s.size() > k_max_string || s.find('\0') != std::string::npos) {
      return bad(std::string("\"") + key + "\" is empty, too long or contains NUL");
    }
    return s;
  }
  Result<bool> boolean(const char* key, bool fallback) const
  {
    auto it = m_obj.find(key);
    if (it == m_obj.end()) {
      return fallback;
    }
    if (!it->is_boolean()) {
      return bad(std::string("\"") + key + "\" must be true or false");
    }
    return it->get<bool>();
  }
  Result<double> number(const char* key) const
  {
    auto it = m_obj.find(key);
    if (it == m_obj.end() || !it->is_number()) {
      return bad(std::string("\"") + key + "\" must be a number");
    }
    return it->get<double>();
  }

private:
  const json& m_obj;
};

#define SH_TRY(var, expr)                                                                                            \
  auto var = (expr);                                                                                                 \
  if (!var) {                                                                                                        \
    return var.error();                                                                                              \
  }

inline Result<json> parse_json(std::string_view payload)
{
  json j = json::parse(payload, nullptr, false);
  if (j.is_discarded()) {
    return bad("not valid JSON");
  }
  if (!j.is_object()) {
    return bad("not a JSON object");
  }
  return j;
}

inline json envelope(const char* type)
{
  return json{{"v", k_version}, {"type", type}};
}

} // namespace stagehand::proto::detail
