// JSON mapping of the daemon protocol's requests (nlohmann-json: a well-kept, header-only library
// whose parser reports malformed input as exceptions we turn into values here; replies.cpp maps
// the replies).
#include "stagehand/proto/messages.hpp"

#include "stagehand/proto/json_fields.hpp"

#include <cerrno>

namespace stagehand::proto {

using namespace detail;

namespace {

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
  SH_TRY(delivered, j.contains("delivered") ? f.str("delivered") : Result<std::string>(std::string()));
  SH_TRY(delivered_id, j.contains("delivered_id") ? f.str("delivered_id") : Result<std::string>(std::string()));
  SourceSpec s;
  s.delivered = *delivered;
  s.delivered_id = *delivered_id;
  s.shown = *shown;
  s.path = *path;
  s.dest = *dest;
  if (s.path.front() != '/') {
    return bad("\"path\" must be absolute");
  }
  auto named_kind = stage::source_kind_named(*kind);
  if (!named_kind) {
    return bad("\"kind\" must be \"file\" or \"dir\"");
  }
  s.kind = *named_kind;
  auto named_unpack = stage::unpack_named(*unpack);
  if (!named_unpack) {
    return bad("\"unpack\" must be \"auto\" or \"never\"");
  }
  s.unpack = *named_unpack;
  return s;
}

// A stage request, or a cache_view (the same fields, without max_bytes).
Result<Request> parse_stage_or_view(const json& j, const Fields& f, const std::string& op)
{
  SH_TRY(job, f.u32("job_id"));
  SH_TRY(max, op == "stage" ? f.u64("max_bytes") : Result<std::uint64_t>(std::uint64_t{0}));
  auto it = j.find("sources");
  if (it == j.end() || !it->is_array() || it->empty() || it->size() > k_max_sources) {
    return bad("\"sources\" must be a list of 1 to " + std::to_string(k_max_sources) + " sources");
  }
  SH_TRY(misses, j.contains("misses") ? f.str("misses") : Result<std::string>(std::string("read")));
  if (*misses != "read" && *misses != "report") {
    return bad("\"misses\" must be \"read\" or \"report\"");
  }
  Stage s{*job, {}, *max, *misses == "report" ? Misses::report : Misses::read};
  for (const auto& item : *it) {
    SH_TRY(src, parse_source(item));
    s.sources.push_back(std::move(*src));
  }
  if (op == "cache_view") {
    SH_TRY(read, f.boolean("read_claimed", false));
    SH_TRY(interval, j.contains("progress_interval") ? f.u32("progress_interval") : Result<std::uint32_t>(0U));
    const auto claimed = *read ? ClaimedMisses::read_for_view : ClaimedMisses::staged;
    return Request{CacheView{s.job_id, std::move(s.sources), claimed, std::chrono::seconds(*interval)}};
  }
  return Request{std::move(s)};
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
    SH_TRY(staging, f.boolean("stage_data", true));
    return Request{RegisterJob{*job, *uid, *gid, *staging ? stage::StagingAsked::yes : stage::StagingAsked::no}};
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
  if (*op == "stage" || *op == "cache_view") {
    return parse_stage_or_view(j, f, *op);
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
  if (*op == "stage_out_retry") {
    SH_TRY(job, f.u32("job_id"));
    return Request{StageOutRetry{*job}};
  }
  return bad("unknown operation \"" + op->substr(0, 64) + "\"");
}

json source_json(const SourceSpec& s)
{
  json j{{"shown", s.shown},
         {"path", s.path},
         {"dest", s.dest},
         {"kind", stage::name_of(s.kind)},
         {"unpack", stage::name_of(s.unpack)}};
  if (!s.delivered.empty()) {
    j["delivered"] = s.delivered;
  }
  if (!s.delivered_id.empty()) {
    j["delivered_id"] = s.delivered_id;
  }
  return j;
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
                               [](const Gc&) { return "gc"; },
                               [](const StageOutRetry&) { return "stage_out_retry"; },
                               [](const CacheView&) { return "cache_view"; }},
                    r);
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
                          j["stage_data"] = x.staging == stage::StagingAsked::yes;
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
                          if (x.misses == Misses::report) {
                            j["misses"] = "report";
                          }
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
                        [&](const Gc& x) { j["dry_run"] = x.dry_run; },
                        [&](const StageOutRetry& x) { j["job_id"] = x.job_id; },
                        [&](const CacheView& x) {
                          j["job_id"] = x.job_id;
                          if (x.claimed == ClaimedMisses::read_for_view) {
                            j["read_claimed"] = true;
                            j["progress_interval"] = x.progress_interval.count();
                          }
                          j["sources"] = json::array();
                          for (const auto& s : x.sources) {
                            j["sources"].push_back(source_json(s));
                          }
                        }},
             r);
  return j.dump();
}

Result<std::string> serialize_checked(const Request& r)
{
  try {
    return serialize(r);
  } catch (const json::exception&) {
    return Error{ErrorKind::refused, EILSEQ,
                 "a path or name in the request is not valid UTF-8, which the node daemon's protocol cannot carry"};
  }
}

} // namespace stagehand::proto
