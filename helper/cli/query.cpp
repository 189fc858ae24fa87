// status and cache: questions to the node daemon.
#include "commands.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/stage/progress.hpp"
#include "stagehand/util/units.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <ctime>

namespace stagehand::cli {

namespace {

using nlohmann::json;

// Sends a request to the node's daemon; the result frame, or nullopt after one clear line.
std::optional<proto::ReplyFrame> ask(const CommonArgs& common, const proto::Request& request)
{
  auto config = load_config(common.config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return std::nullopt;
  }
  const std::string socket = expand_node(config->daemon.socket, common.node);
  ipc::CallOptions options;
  options.idle_deadline = std::chrono::milliseconds(30000);
  auto reply = ipc::call(socket, request, options);
  if (!reply) {
    spdlog::error("stagehandd is not answering on node {} ({}: {})", common.node, socket, reply.error().message);
    return std::nullopt;
  }
  if (reply->error) {
    spdlog::error("{}", reply->error->message);
    return std::nullopt;
  }
  return *reply;
}

// The result object without the protocol's envelope, for --json.
json body_of(const std::string& result_json)
{
  json j = json::parse(result_json, nullptr, false);
  for (const char* k : {"v", "type", "ok"}) {
    j.erase(k);
  }
  return j;
}

std::string when(std::int64_t t)
{
  char buf[32];
  std::time_t tt = static_cast<std::time_t>(t);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&tt));
  return buf;
}

// Without an answer from the daemon: the results kept after failed stage-outs, read from the base
// directory (root-owned records that anyone may read; a user sees only their own).
void local_status(const CommonArgs& common)
{
  auto config = load_config(common.config_path, OwnerCheck::require_root_owned);
  auto base = config ? tmpdir::base_path(*config, common.node) : Result<std::string>(config.error());
  auto base_fd = base ? tmpdir::open_base(*config, common.node) : Result<UniqueFd>(base.error());
  if (!base_fd) {
    return;
  }
  const uid_t me = ::geteuid();
  json kept = json::array();
  for (const auto& k : stageout::load_kept(base_fd->get())) {
    if (me != 0 && k.uid != me) {
      continue;
    }
    if (common.json) {
      kept.push_back(json{{"job_id", k.job_id}, {"uid", k.uid}, {"dir", *base + "/" + k.dir}, {"state", stageout::kept_state(k)}});
    } else {
      if (kept.empty()) {
        std::printf("stage-out results kept on node %s:\n", common.node.c_str());
      }
      kept.push_back(k.job_id);
      std::printf("  %-10u %-12u %s  %s\n", k.job_id, k.uid, stageout::kept_state(k).c_str(), (*base + "/" + k.dir).c_str());
    }
  }
  if (common.json) {
    std::printf("%s\n", json{{"node", common.node}, {"daemon", false}, {"jobs", kept}}.dump(2).c_str());
  }
}

} // namespace

int cmd_status(const std::vector<std::string>& args)
{
  auto common = parse_common(args);
  if (!common || !common->positional.empty()) {
    spdlog::error("usage: stagehand status [--json] [--config FILE] [--node NAME]");
    return 2;
  }
  auto reply = ask(*common, proto::StatusQuery{});
  if (!reply) {
    local_status(*common); // what the base directory itself shows; the exit code stays the error's
    return 1;
  }
  if (common->json) {
    std::printf("%s\n", body_of(reply->result_json).dump(2).c_str());
    return 0;
  }
  auto s = proto::parse_status_reply(reply->result_json);
  if (!s) {
    spdlog::error("{}", s.error().message);
    return 1;
  }
  std::printf("node %s\n", s->node.c_str());
  std::printf("jobs: %zu\n", s->jobs.size());
  for (const auto& j : s->jobs) {
    std::printf("  %-10u %-12s %-8s %s\n", j.job_id, j.user.c_str(), j.state.c_str(), j.dir.c_str());
  }
  std::printf("cache: %llu entries, %s of %s; %llu hits, %llu misses, %llu evictions, %llu misses not cached\n",
              static_cast<unsigned long long>(s->cache.entries), human_bytes(s->cache.bytes).c_str(),
              human_bytes(s->cache.max_bytes).c_str(), static_cast<unsigned long long>(s->cache.hits),
              static_cast<unsigned long long>(s->cache.misses), static_cast<unsigned long long>(s->cache.evictions),
              static_cast<unsigned long long>(s->cache.fills_dropped));
  std::printf("cleanup backlog: %llu directories in the trash\n", static_cast<unsigned long long>(s->trash_entries));
  for (const auto& p : s->stagings) {
    std::printf("%s\n", stage::progress_text(p).c_str()); // as the job's output shows it
  }
  return 0;
}

int cmd_cache(const std::vector<std::string>& args)
{
  auto common = parse_common(args);
  if (!common || common->positional.empty()) {
    spdlog::error("usage: stagehand cache ls [--json] | cache evict SOURCE|--all");
    return 2;
  }
  const std::string sub = common->positional[0];
  if (sub == "ls") {
    auto reply = ask(*common, proto::CacheList{});
    if (!reply) {
      return 1;
    }
    if (common->json) {
      std::printf("%s\n", body_of(reply->result_json)["entries"].dump(2).c_str());
      return 0;
    }
    auto l = proto::parse_cache_list_reply(reply->result_json);
    if (!l) {
      spdlog::error("{}", l.error().message);
      return 1;
    }
    for (const auto& e : l->entries) {
      std::printf("%10s %8llu files  last used %s%s  %s\n", human_bytes(e.bytes).c_str(),
                  static_cast<unsigned long long>(e.files), when(e.last_used).c_str(), e.in_use ? "  in use" : "",
                  e.source.c_str());
    }
    return 0;
  }
  if (sub == "evict") {
    if (common->all == (common->positional.size() == 2)) {
      spdlog::error("usage: stagehand cache evict SOURCE|--all");
      return 2;
    }
    proto::CacheEvict req;
    req.all = common->all;
    if (!req.all) {
      req.source = common->positional[1];
    }
    auto reply = ask(*common, req);
    if (!reply) {
      return 1;
    }
    auto r = proto::parse_gc_reply(reply->result_json);
    if (!r) {
      spdlog::error("{}", r.error().message);
      return 1;
    }
    for (const auto& a : r->actions) {
      std::printf("evicted %s\n", a.path.c_str());
    }
    for (const auto& e : r->errors) {
      spdlog::error("{}", e);
    }
    return r->errors.empty() ? 0 : 1;
  }
  spdlog::error("unknown cache command \"{}\" (ls or evict)", sub);
  return 2;
}

} // namespace stagehand::cli
