// The job control variables a prolog or epilog reads (job_env.hpp).
#include "stagehand/job/job_env.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

namespace stagehand::job {

namespace {

// A job control variable as slurmd hands it to a prolog or epilog; empty when unset.
std::string_view job_control(const char* name)
{
  const char* v = std::getenv((std::string("SPANK_") + name).c_str());
  return v ? std::string_view(v) : std::string_view();
}

} // namespace

std::optional<StageOutJob> stage_out_of_job()
{
  const std::string_view specs = job_control(k_stage_out_var);
  if (specs.empty()) {
    return std::nullopt;
  }
  return StageOutJob{std::string(specs), std::string(job_control(k_stage_out_dir_var))};
}

stage::StagingAsked staging_of_job()
{
  const std::string_view option = job_control(k_stage_option_var);
  const bool asked = !job_control(k_stage_data_var).empty() || (!option.empty() && option != "(null)");
  return asked ? stage::StagingAsked::yes : stage::StagingAsked::no;
}

} // namespace stagehand::job
