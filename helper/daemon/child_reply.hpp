// What stagehandd's staging children say to it: {"ok":true,...} or {"ok":false,"kind":...,"error":...}.
#pragma once

#include "stagehand/ipc/child.hpp"
#include "stagehand/util/result.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace stagehand::daemon {

inline std::string child_error(const Error& e)
{
  using nlohmann::json;
  return json{{"ok", false}, {"kind", kind_name(e.kind)}, {"code", e.code}, {"error", e.message}}.dump(
    -1, ' ', false, json::error_handler_t::replace);
}

inline Result<nlohmann::json> child_reply(const ipc::Message& m)
{
  nlohmann::json j = nlohmann::json::parse(m.text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::internal("a staging child sent garbage");
  }
  if (!j.value("ok", false)) {
    Error e = Error::internal(j.value("error", std::string("a staging child failed")));
    e.kind = kind_from_name(j.value("kind", std::string("internal"))).value_or(ErrorKind::internal);
    e.code = j.value("code", 0);
    return e;
  }
  return j;
}

} // namespace stagehand::daemon
