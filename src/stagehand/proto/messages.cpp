// JSON mapping of the daemon protocol (nlohmann-json: a well-kept, header-only library whose
// parser reports malformed input as exceptions we turn into values here).
#include "stagehand/proto/messages.hpp"

#include "stagehand/proto/frame.hpp"

#include <nlohmann/json.hpp>

#include <limits>

namespace stagehand::proto {

using nlohmann::json;

namespace {

Error bad(const std::string& why) { return Error::refused("protocol: " + why); }

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

Result<SourceSpec> parse_source(const json& j)
{
  if (!j.is_object()) {
    return bad("each source must be an object");
  }
  Fields f(j);
  SH_TRY(shown, f.str("shown"));
  SH_TRY(path, f.str("path"));
  SH_TRY(dest, f.str("dest"));
  SH_TRY(kind, f.str("kind"));
  SH_TRY(unpack, f.str("unpack"));
  SourceSpec s;
  s.shown = *shown;
  s.path = *path;
  s.dest = *dest;
  if (s.path.front() != '/') {
    return bad("\"path\" must be absolute");
  }
  if (*kind == "file") {
    s.kind = SourceKind::file;
  } else if (*kind == "dir") {
    s.kind = SourceKind::dir;
  } else {
    return bad("\"kind\" must be \"file\" or \"dir\"");
  }
  if (*unpack == "auto") {
    s.unpack = Unpack::if_archive;
  } else if (*unpack == "never") {
    s.unpack = Unpack::never;
  } else {
    return bad("\"unpack\" must be \"auto\" or \"never\"");
  }
  return s;
}

Result<Request> parse_object(const json& j)
{
  if (!j.is_object()) {
    return bad("a request must be a JSON object");
  }
  Fields f(j);
  SH_TRY(version, f.u64("v", 1000));
  if (*version != static_cast<std::uint64_t>(k_version)) {
    return bad("version " + std::to_string(*version) + " is not supported (this daemon speaks " +
               std::to_string(k_version) + ")");
  }
  SH_TRY(op, f.str("op"));
  if (*op == "register") {
    SH_TRY(job, f.u32("job_id"));
    SH_TRY(uid, f.u32("uid"));
    SH_TRY(gid, f.u32("gid"));
    return Request{RegisterJob{*job, *uid, *gid}};
  }
  if (*op == "end_job") {
    SH_TRY(job, f.u32("job_id"));
    SH_TRY(trash, f.str("trash", true));
    SH_TRY(until, f.i64("keep_until"));
    EndJob e{*job, *trash, *until, "", "", ""};
    if (j.contains("pending")) {
      SH_TRY(pending, f.str("pending"));
      SH_TRY(specs, f.str("stage_out"));
      SH_TRY(dir, f.str("stage_out_dir", true));
      e.pending = *pending;
      e.stage_out = *specs;
      e.stage_out_dir = *dir;
    }
    return Request{e};
  }
  if (*op == "stage") {
    SH_TRY(job, f.u32("job_id"));
    SH_TRY(max, f.u64("max_bytes"));
    auto it = j.find("sources");
    if (it == j.end() || !it->is_array() || it->empty() || it->size() > k_max_sources) {
      return bad("\"sources\" must be a list of 1 to " + std::to_string(k_max_sources) + " sources");
    }
    Stage s{*job, {}, *max};
    for (const auto& item : *it) {
      SH_TRY(src, parse_source(item));
      s.sources.push_back(std::move(*src));
    }
    return Request{std::move(s)};
  }
  if (*op == "status") {
    return Request{StatusQuery{}};
  }
  if (*op == "cache_ls") {
    return Request{CacheList{}};
  }
  if (*op == "cache_evict") {
    SH_TRY(all, f.boolean("all", false));
    CacheEvict e;
    e.all = *all;
    if (!e.all) {
      SH_TRY(source, f.str("source"));
      e.source = *source;
    }
    return Request{e};
  }
  if (*op == "gc") {
    SH_TRY(dry, f.boolean("dry_run", false));
    return Request{Gc{*dry}};
  }
  return bad("unknown operation \"" + op->substr(0, 64) + "\"");
}

json source_json(const SourceSpec& s)
{
  return json{{"shown", s.shown},
              {"path", s.path},
              {"dest", s.dest},
              {"kind", s.kind == SourceKind::dir ? "dir" : "file"},
              {"unpack", s.unpack == Unpack::never ? "never" : "auto"}};
}

json progress_json(const Progress& p)
{
  return json{{"source", p.source}, {"done_bytes", p.done_bytes}, {"total_bytes", p.total_bytes}, {"seconds", p.seconds}};
}

Result<Progress> parse_progress(const json& j)
{
  Fields f(j);
  SH_TRY(source, f.str("source", true));
  SH_TRY(done, f.u64("done_bytes"));
  SH_TRY(total, f.u64("total_bytes"));
  SH_TRY(secs, f.number("seconds"));
  return Progress{*source, *done, *total, *secs};
}

Result<json> parse_json(std::string_view payload)
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

json envelope(const char* type)
{
  return json{{"v", k_version}, {"type", type}};
}

} // namespace

const char* op_name(const Request& r)
{
  return std::visit(Overloaded{[](const RegisterJob&) { return "register"; },
                               [](const EndJob&) { return "end_job"; },
                               [](const Stage&) { return "stage"; },
                               [](const StatusQuery&) { return "status"; },
                               [](const CacheList&) { return "cache_ls"; },
                               [](const CacheEvict&) { return "cache_evict"; },
                               [](const Gc&) { return "gc"; }},
                    r);
}

const char* outcome_name(CacheOutcome c)
{
  switch (c) {
  case CacheOutcome::hit:
    return "cache hit";
  case CacheOutcome::miss:
    return "cache miss";
  case CacheOutcome::none:
    return "no cache";
  }
  return "no cache";
}

Result<Request> parse_request(std::string_view payload)
{
  if (payload.size() > k_max_request_bytes) {
    return Error::limit("protocol: request too large");
  }
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  return parse_object(*j);
}

std::string serialize(const Request& r)
{
  json j{{"v", k_version}, {"op", op_name(r)}};
  std::visit(Overloaded{[&](const RegisterJob& x) {
                          j["job_id"] = x.job_id;
                          j["uid"] = x.uid;
                          j["gid"] = x.gid;
                        },
                        [&](const EndJob& x) {
                          j["job_id"] = x.job_id;
                          j["trash"] = x.trash;
                          j["keep_until"] = x.keep_until;
                          if (!x.pending.empty()) {
                            j["pending"] = x.pending;
                            j["stage_out"] = x.stage_out;
                            j["stage_out_dir"] = x.stage_out_dir;
                          }
                        },
                        [&](const Stage& x) {
                          j["job_id"] = x.job_id;
                          j["max_bytes"] = x.max_bytes;
                          j["sources"] = json::array();
                          for (const auto& s : x.sources) {
                            j["sources"].push_back(source_json(s));
                          }
                        },
                        [](const StatusQuery&) {}, [](const CacheList&) {},
                        [&](const CacheEvict& x) {
                          if (x.all) {
                            j["all"] = true;
                          } else {
                            j["source"] = x.source;
                          }
                        },
                        [&](const Gc& x) { j["dry_run"] = x.dry_run; }},
             r);
  return j.dump();
}

std::string serialize_progress(const Progress& p)
{
  json j = envelope("progress");
  j.update(progress_json(p));
  return j.dump();
}

std::string serialize_error(const Error& e)
{
  json j = envelope("result");
  j["ok"] = false;
  j["kind"] = kind_name(e.kind);
  j["error"] = e.message;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string serialize_result(const Reply& r)
{
  json j = envelope("result");
  j["ok"] = true;
  std::visit(Overloaded{[](const Done&) {},
                        [&](const StageReply& x) {
                          j["staged"] = json::array();
                          for (const auto& s : x.staged) {
                            j["staged"].push_back(json{{"shown", s.shown},
                                                       {"dest", s.dest},
                                                       {"how", s.how},
                                                       {"files", s.files},
                                                       {"bytes", s.bytes},
                                                       {"seconds", s.seconds},
                                                       {"cache", outcome_name(s.cache)},
                                                       {"note", s.note}});
                          }
                        },
                        [&](const StatusReply& x) {
                          j["node"] = x.node;
                          j["jobs"] = json::array();
                          for (const auto& job : x.jobs) {
                            j["jobs"].push_back(json{{"job_id", job.job_id},
                                                     {"user", job.user},
                                                     {"uid", job.uid},
                                                     {"dir", job.dir},
                                                     {"state", job.state}});
                          }
                          j["cache"] = json{{"entries", x.cache.entries},     {"bytes", x.cache.bytes},
                                            {"max_bytes", x.cache.max_bytes}, {"hits", x.cache.hits},
                                            {"misses", x.cache.misses},       {"evictions", x.cache.evictions}};
                          j["trash"] = json{{"entries", x.trash_entries}};
                          j["stagings"] = json::array();
                          for (const auto& p : x.stagings) {
                            j["stagings"].push_back(progress_json(p));
                          }
                        },
                        [&](const CacheListReply& x) {
                          j["entries"] = json::array();
                          for (const auto& e : x.entries) {
                            j["entries"].push_back(json{{"source", e.source},
                                                        {"bytes", e.bytes},
                                                        {"files", e.files},
                                                        {"last_used", e.last_used},
                                                        {"in_use", e.in_use}});
                          }
                        },
                        [&](const GcReply& x) {
                          j["dry_run"] = x.dry_run;
                          j["actions"] = json::array();
                          for (const auto& a : x.actions) {
                            j["actions"].push_back(json{{"path", a.path}, {"reason", a.reason}});
                          }
                          j["errors"] = x.errors;
                        }},
             r);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<ReplyFrame> parse_reply_frame(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  Fields f(*j);
  SH_TRY(type, f.str("type"));
  ReplyFrame frame;
  if (*type == "progress") {
    SH_TRY(p, parse_progress(*j));
    frame.progress = *p;
    return frame;
  }
  if (*type != "result") {
    return bad("unknown reply type \"" + type->substr(0, 64) + "\"");
  }
  SH_TRY(ok, f.boolean("ok", false));
  if (!*ok) {
    SH_TRY(kind, f.str("kind"));
    SH_TRY(message, f.str("error", true));
    Error e = Error::internal(*message);
    e.kind = kind_from_name(*kind).value_or(ErrorKind::internal);
    frame.error = e;
    return frame;
  }
  frame.result_json = std::string(payload);
  return frame;
}

Result<StageReply> parse_stage_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  auto it = j->find("staged");
  if (it == j->end() || !it->is_array()) {
    return bad("\"staged\" must be a list");
  }
  StageReply r;
  for (const auto& item : *it) {
    if (!item.is_object()) {
      return bad("each staged source must be an object");
    }
    Fields f(item);
    SH_TRY(shown, f.str("shown"));
    SH_TRY(dest, f.str("dest"));
    SH_TRY(how, f.str("how"));
    SH_TRY(files, f.u64("files"));
    SH_TRY(bytes, f.u64("bytes"));
    SH_TRY(secs, f.number("seconds"));
    SH_TRY(cache, f.str("cache"));
    SH_TRY(note, f.str("note", true));
    StagedSource s{*shown, *dest, *how, *files, *bytes, *secs, CacheOutcome::none, *note};
    s.cache = *cache == "cache hit" ? CacheOutcome::hit : *cache == "cache miss" ? CacheOutcome::miss : CacheOutcome::none;
    r.staged.push_back(std::move(s));
  }
  return r;
}

Result<StatusReply> parse_status_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  Fields f(*j);
  StatusReply r;
  SH_TRY(node, f.str("node"));
  r.node = *node;
  auto jobs = j->find("jobs");
  auto cache = j->find("cache");
  if (jobs == j->end() || !jobs->is_array() || cache == j->end() || !cache->is_object()) {
    return bad("status reply needs \"jobs\" and \"cache\"");
  }
  for (const auto& item : *jobs) {
    if (!item.is_object()) {
      return bad("each job must be an object");
    }
    Fields jf(item);
    SH_TRY(id, jf.u32("job_id"));
    SH_TRY(user, jf.str("user", true));
    SH_TRY(uid, jf.u32("uid"));
    SH_TRY(dir, jf.str("dir", true));
    SH_TRY(state, jf.str("state"));
    r.jobs.push_back(JobInfo{*id, *user, *uid, *dir, *state});
  }
  Fields cf(*cache);
  SH_TRY(entries, cf.u64("entries"));
  SH_TRY(bytes, cf.u64("bytes"));
  SH_TRY(max, cf.u64("max_bytes"));
  SH_TRY(hits, cf.u64("hits"));
  SH_TRY(misses, cf.u64("misses"));
  SH_TRY(evictions, cf.u64("evictions"));
  r.cache = CacheStats{*entries, *bytes, *max, *hits, *misses, *evictions};
  if (auto trash = j->find("trash"); trash != j->end() && trash->is_object()) {
    SH_TRY(t, Fields(*trash).u64("entries"));
    r.trash_entries = *t;
  }
  if (auto st = j->find("stagings"); st != j->end() && st->is_array()) {
    for (const auto& item : *st) {
      SH_TRY(p, parse_progress(item));
      r.stagings.push_back(*p);
    }
  }
  return r;
}

Result<CacheListReply> parse_cache_list_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  auto it = j->find("entries");
  if (it == j->end() || !it->is_array()) {
    return bad("\"entries\" must be a list");
  }
  CacheListReply r;
  for (const auto& item : *it) {
    if (!item.is_object()) {
      return bad("each entry must be an object");
    }
    Fields f(item);
    SH_TRY(source, f.str("source", true));
    SH_TRY(bytes, f.u64("bytes"));
    SH_TRY(files, f.u64("files"));
    SH_TRY(last, f.i64("last_used"));
    SH_TRY(in_use, f.boolean("in_use", false));
    r.entries.push_back(CacheEntryInfo{*source, *bytes, *files, *last, *in_use});
  }
  return r;
}

Result<GcReply> parse_gc_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  Fields f(*j);
  GcReply r;
  SH_TRY(dry, f.boolean("dry_run", false));
  r.dry_run = *dry;
  auto actions = j->find("actions");
  if (actions == j->end() || !actions->is_array()) {
    return bad("\"actions\" must be a list");
  }
  for (const auto& item : *actions) {
    if (!item.is_object()) {
      return bad("each action must be an object");
    }
    Fields af(item);
    SH_TRY(path, af.str("path"));
    SH_TRY(reason, af.str("reason"));
    r.actions.push_back(GcAction{*path, *reason});
  }
  if (auto errors = j->find("errors"); errors != j->end() && errors->is_array()) {
    for (const auto& e : *errors) {
      if (e.is_string()) {
        r.errors.push_back(e.get<std::string>());
      }
    }
  }
  return r;
}

} // namespace stagehand::proto
