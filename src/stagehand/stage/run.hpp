// Staging on one node: every checked source into the job's directory, one summary line each;
// on failure, nothing partial stays behind.
#pragma once

#include "stagehand/stage/spec.hpp"
#include "stagehand/util/result.hpp"

#include <string>
#include <vector>

namespace stagehand::stage {

struct StageLimits
{
  std::uint64_t max_bytes = 2ULL << 40; // per job, per node: data written in total
  unsigned writer_threads = 0;          // for archives; see ExtractLimits
};

// Stages `sources` below the directory open at `tmpdir_fd` (destinations must not exist).
// Returns one summary line per source ("what -> where: N files, B bytes, S s"). On error, every
// destination made by this call is removed and the error names the source and the reason.
Result<std::vector<std::string>> stage_all(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                           const std::string& tmpdir_path, const StageLimits& limits);

} // namespace stagehand::stage
