// Staging on one node: every checked source into the job's directory, one summary line each;
// on failure, nothing partial stays behind.
#pragma once

#include "stagehand/stage/progress.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/result.hpp"

#include <string>
#include <vector>

namespace stagehand::stage {

struct StageLimits
{
  std::uint64_t max_bytes = 2ULL << 40; // per job, per node: data written in total
  unsigned writer_threads = 0;          // for archives; see ExtractLimits
  std::vector<std::string> allowed_roots; // [stage] allowed_roots, checked again on what is opened
  ProgressBoard* progress = nullptr;      // when set: the source being staged, for a reporter thread
};

// "unpacked SRC -> TMPDIR/DEST: N files, B in S s (CACHE)": the one summary line per source.
std::string summary_line(const std::string& how, const std::string& shown, const std::string& tmpdir_path,
                         const std::string& dest, std::uint64_t files, std::uint64_t bytes, double seconds,
                         const std::string& cache, const std::string& note = "");

// Stages `sources` below the directory open at `tmpdir_fd`. Each source is opened with
// open_source (no FIFO hangs it; allowed_roots checked on the descriptor); each destination is
// created exclusively (an existing one is refused, never replaced). Returns one summary line per
// source ("what -> where: N files, B bytes, S s"). On error (out of memory included: no exception
// leaves it), what this call created is removed, nothing else, and the error names the source and
// the reason.
Result<std::vector<std::string>> stage_all(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                           const std::string& tmpdir_path, const StageLimits& limits);

} // namespace stagehand::stage
