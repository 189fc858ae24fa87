// JSON mapping of the daemon protocol's replies: results, errors and progress frames
// (messages.cpp maps the requests).
#include "stagehand/proto/messages.hpp"

#include "stagehand/proto/json_fields.hpp"

namespace stagehand::proto {

using namespace detail;

namespace {

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

} // namespace

const char* outcome_name(CacheOutcome c)
{
  switch (c) {
  case CacheOutcome::hit:
    return "cache hit";
  case CacheOutcome::miss:
    return "cache miss";
  case CacheOutcome::none:
    return "no cache";
  case CacheOutcome::absent:
    return "not staged";
  }
  return "no cache";
}

std::string serialize_progress(const Progress& p)
{
  json j = envelope("progress");
  j.update(progress_json(p));
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
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
                                                       {"how", stage::name_of(s.how)},
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
                                            {"misses", x.cache.misses},       {"evictions", x.cache.evictions},
                                            {"fills_dropped", x.cache.fills_dropped}};
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
                        [&](const RetryReply& x) { j["said"] = x.said; },
                        [&](const StageOutTaken& x) { j["stage_out_taken"] = x.claimed_as; },
                        [&](const CacheViewReply& x) {
                          j["entries"] = json::array();
                          for (const auto& e : x.entries) {
                            j["entries"].push_back(json{{"entry", e.entry},
                                                        {"files", e.files},
                                                        {"bytes", e.bytes},
                                                        {"how", stage::name_of(e.how)},
                                                        {"cache", e.cache == CacheOutcome::miss ? "miss" : "hit"},
                                                        {"seconds", e.seconds}});
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
    // "not staged": how a daemon before 2026-11 said nothing was placed (an `absent` source).
    auto placed = *how == "not staged" ? std::optional(stage::Placement::copied) : stage::placement_named(*how);
    if (!placed) {
      return bad("\"how\" must be \"copied\" or \"unpacked\"");
    }
    StagedSource s{*shown, *dest, *placed, *files, *bytes, *secs, CacheOutcome::none, *note};
    s.cache = *cache == "cache hit"    ? CacheOutcome::hit
              : *cache == "cache miss" ? CacheOutcome::miss
              : *cache == "not staged" ? CacheOutcome::absent
                                       : CacheOutcome::none;
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
  r.cache = CacheStats{*entries, *bytes, *max, *hits, *misses, *evictions, 0};
  if (cache->contains("fills_dropped")) { // a daemon before issue 25 does not say
    SH_TRY(dropped, cf.u64("fills_dropped"));
    r.cache.fills_dropped = *dropped;
  }
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

Result<RetryReply> parse_retry_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  Fields f(*j);
  SH_TRY(said, f.str("said", true));
  return RetryReply{*said};
}

Result<StageOutTaken> parse_stage_out_taken(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  Fields f(*j);
  SH_TRY(claimed, f.str("stage_out_taken", true));
  if (claimed->empty()) {
    return Error::internal("protocol: \"stage_out_taken\" must name the claimed directory");
  }
  return StageOutTaken{*claimed};
}

Result<CacheViewReply> parse_cache_view_reply(std::string_view payload)
{
  auto j = parse_json(payload);
  if (!j) {
    return j.error();
  }
  auto it = j->find("entries");
  if (it == j->end() || !it->is_array() || it->size() > k_max_sources) {
    return Error::internal("protocol: \"entries\" must be a list of names");
  }
  CacheViewReply r;
  for (const auto& e : *it) {
    if (!e.is_object()) {
      return Error::internal("protocol: \"entries\" must be a list of objects");
    }
    Fields f(e);
    SH_TRY(entry, f.str("entry", true));
    SH_TRY(files, f.u64("files"));
    SH_TRY(bytes, f.u64("bytes"));
    SH_TRY(how, f.str("how", true));
    auto placed = how->empty() ? std::optional(stage::Placement::copied) : stage::placement_named(*how);
    if (!placed) {
      return Error::internal("protocol: \"how\" must be \"copied\" or \"unpacked\"");
    }
    // "cache" and "seconds" came later: a daemon without them answered hits only.
    SH_TRY(cache, e.contains("cache") ? f.str("cache") : Result<std::string>(std::string("hit")));
    SH_TRY(seconds, e.contains("seconds") ? f.number("seconds") : Result<double>(0.0));
    if ((*cache != "hit" && *cache != "miss") || *seconds < 0) {
      return Error::internal("protocol: \"cache\" must be \"hit\" or \"miss\", \"seconds\" not negative");
    }
    r.entries.push_back(
      ViewEntry{*entry, *files, *bytes, *placed, *cache == "miss" ? CacheOutcome::miss : CacheOutcome::hit, *seconds});
  }
  return r;
}

} // namespace stagehand::proto
