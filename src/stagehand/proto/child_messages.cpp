#include "stagehand/proto/child_messages.hpp"

#include "stagehand/proto/json_fields.hpp"

namespace stagehand::proto {

using namespace detail;

namespace {

std::string ok(json j)
{
  j["ok"] = true;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The object a child sent, or the error it reported.
Result<json> said(const std::string& text)
{
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::internal("a staging child sent garbage");
  }
  Fields f(j);
  auto fine = f.boolean("ok", false);
  if (!fine) {
    return Error::internal("a staging child sent garbage: " + fine.error().message);
  }
  if (!*fine) {
    auto message = f.str("error");
    Error e = Error::internal(message ? *message : std::string("a staging child failed"));
    auto kind = f.str("kind");
    e.kind = kind ? kind_from_name(*kind).value_or(ErrorKind::internal) : ErrorKind::internal;
    auto code = f.i64("code");
    e.code = code ? static_cast<int>(*code) : 0;
    return e;
  }
  return j;
}

Error garbage(const Error& e) { return Error::internal("a staging child sent garbage: " + e.message); }

// The first of `fields` that could not be read, if any.
template<typename... R> std::optional<Error> first_error(const R&... fields)
{
  std::optional<Error> e;
  ((e || fields ? void() : void(e = fields.error())), ...);
  return e;
}

} // namespace

std::string child_message(const SourceIdentified& m)
{
  return ok(json{{"key", m.key},
                 {"files", m.files},
                 {"bytes", m.bytes},
                 {"newest_ns", m.newest_ns},
                 {"archive", m.archive},
                 {"zip", m.zip},
                 {"dir", m.dir}});
}

namespace {

json created_json(const stage::CreatedName& c)
{
  return json{{"rel", c.rel}, {"dev", static_cast<std::uint64_t>(c.dev)}, {"ino", static_cast<std::uint64_t>(c.ino)}};
}

// Absent: nothing recorded (a rollback then removes nothing of it).
Result<stage::CreatedName> created_named(const json& j)
{
  auto it = j.find("created");
  if (it == j.end()) {
    return stage::CreatedName{};
  }
  if (!it->is_object()) {
    return garbage(bad("\"created\" must be an object"));
  }
  Fields f(*it);
  auto rel = f.str("rel", true);
  auto dev = f.u64("dev");
  auto ino = f.u64("ino");
  if (auto e = first_error(rel, dev, ino)) {
    return garbage(*e);
  }
  return stage::CreatedName{*rel, static_cast<dev_t>(*dev), static_cast<ino_t>(*ino)};
}

} // namespace

std::string child_message(const TreeStreamed& m)
{
  return ok(json{{"key", m.key},
                 {"changed", m.changed},
                 {"newest_ns", m.newest_ns},
                 {"dropped", m.dropped},
                 {"files", m.files},
                 {"bytes", m.bytes},
                 {"created", created_json(m.created)}});
}

std::string child_message(const Teed& m) { return ok(json{{"bytes", m.bytes}, {"dropped", m.dropped}}); }

std::string child_message(const stage::Placed& m)
{
  return ok(json{
    {"how", stage::name_of(m.how)}, {"files", m.files}, {"bytes", m.bytes}, {"created", created_json(m.created)}});
}

std::string child_failure(const Error& e)
{
  return json{{"ok", false}, {"kind", kind_name(e.kind)}, {"code", e.code}, {"error", e.message}}.dump(
    -1, ' ', false, json::error_handler_t::replace);
}

template<> Result<SourceIdentified> parse_child_message<SourceIdentified>(const std::string& text)
{
  SH_TRY(j, said(text));
  Fields f(*j);
  auto key = f.str("key");
  auto files = f.u64("files");
  auto bytes = f.u64("bytes");
  auto newest = f.i64("newest_ns");
  auto archive = f.boolean("archive", false);
  auto zip = f.boolean("zip", false);
  auto dir = f.boolean("dir", false);
  if (auto e = first_error(key, files, bytes, newest, archive, zip, dir)) {
    return garbage(*e);
  }
  return SourceIdentified{*key, *files, *bytes, *newest, *archive, *zip, *dir};
}

template<> Result<TreeStreamed> parse_child_message<TreeStreamed>(const std::string& text)
{
  SH_TRY(j, said(text));
  Fields f(*j);
  auto key = f.str("key");
  auto changed = f.boolean("changed", true);
  auto newest = f.i64("newest_ns");
  auto dropped = f.str("dropped", true);
  auto files = f.u64("files");
  auto bytes = f.u64("bytes");
  if (auto e = first_error(key, changed, newest, dropped, files, bytes)) {
    return garbage(*e);
  }
  SH_TRY(created, created_named(*j));
  return TreeStreamed{*key, *changed, *newest, *dropped, *files, *bytes, *created};
}

template<> Result<Teed> parse_child_message<Teed>(const std::string& text)
{
  SH_TRY(j, said(text));
  Fields f(*j);
  auto bytes = f.u64("bytes");
  auto dropped = f.str("dropped", true);
  if (auto e = first_error(bytes, dropped)) {
    return garbage(*e);
  }
  return Teed{*bytes, *dropped};
}

template<> Result<stage::Placed> parse_child_message<stage::Placed>(const std::string& text)
{
  SH_TRY(j, said(text));
  Fields f(*j);
  auto how = f.str("how");
  auto files = f.u64("files");
  auto bytes = f.u64("bytes");
  if (auto e = first_error(how, files, bytes)) {
    return garbage(*e);
  }
  auto placed = stage::placement_named(*how);
  if (!placed) {
    return Error::internal("a staging child sent garbage: \"how\" must be \"copied\" or \"unpacked\"");
  }
  SH_TRY(created, created_named(*j));
  return stage::Placed{*placed, *files, *bytes, *created};
}

} // namespace stagehand::proto
