// stage-out retry: copy a job's kept --stage-out results again, through the node's daemon (which
// copies as the results' user whoever asks), or, without a daemon, in this process.
#include "commands.hpp"

#include "stagehand/ipc/client.hpp"
#include "stagehand/job/stage_out.hpp"
#include "stagehand/util/units.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>

namespace stagehand::cli {

namespace {

constexpr const char* k_usage = "usage: stagehand stage-out retry JOBID [--config FILE] [--node NAME]";
// A retry copies what the job's stage-out would have: as long as the daemon's own copies may take.
constexpr std::chrono::hours k_retry_budget{6};

} // namespace

int cmd_stage_out(const std::vector<std::string>& args)
{
  auto common = parse_common(args);
  if (!common || common->positional.size() != 2 || common->positional[0] != "retry") {
    spdlog::error("{}", k_usage);
    return 2;
  }
  auto job_id = parse_u32(common->positional[1]);
  if (!job_id || *job_id == 0) {
    spdlog::error("\"{}\" is not a job id; {}", common->positional[1], k_usage);
    return 2;
  }
  auto config = load_config(common->config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  const std::string socket = expand_node(config->daemon.socket, common->node);
  ipc::CallOptions options;
  options.idle_deadline = k_retry_budget + std::chrono::minutes(15); // the daemon answers when it is done
  auto reply = ipc::call(socket, proto::StageOutRetry{*job_id}, options);
  if (reply && reply->error) {
    spdlog::error("job {}: {}", *job_id, reply->error->message);
    return 1;
  }
  if (reply) {
    auto r = proto::parse_retry_reply(reply->result_json);
    std::printf("job %u: %s\n", *job_id, r ? r->said.c_str() : "copied");
    return 0;
  }
  // Without the daemon: root copies as the results' user and removes them; their own user copies
  // in this process, and the results stay until keep_for (removing them needs root).
  auto said = ::geteuid() == 0 ? job::retry_kept(*config, common->node, *job_id, 0, k_retry_budget)
                               : job::retry_kept_as_self(*config, common->node, *job_id, k_retry_budget);
  if (!said) {
    spdlog::error("job {}: {}", *job_id, said.error().message);
    return 1;
  }
  std::printf("job %u: %s\n", *job_id, said->c_str());
  return 0;
}

} // namespace stagehand::cli
