// Results of a --stage-out that could not complete stay on the node: the directory stays where it
// is and a root-owned record beside it in the base (tmpdir::kept_record_name) says whose they are,
// what was to be copied where, why it failed and until when they stay. Garbage collection keeps
// both until then; `stagehand stage-out retry JOBID` copies them again and then removes them.
// Pure data with a JSON form, and its file in the base directory.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stageout {

struct KeptResults
{
  std::uint32_t job_id = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string dir;          // name under the base: ".stageout.job_<id>.<unique>", or job_<id> when kept
  std::string specs;        // canonical --stage-out entries
  std::string fallback_dir; // the submit directory (for the log)
  std::int64_t until = 0;   // epoch seconds: garbage collection removes them after
  std::string reason;       // what went wrong, for people
  bool operator==(const KeptResults&) const = default;
};

inline constexpr std::size_t k_max_record_bytes = 1U << 20; // far above what save_kept writes
inline constexpr std::size_t k_max_reason = 2000;             // characters of `reason` kept

std::string to_json(const KeptResults& k);
Result<KeptResults> kept_from_json(std::string_view text);

// The record, written atomically as a root-owned 0644 file (users read their own in status).
Status save_kept(int base_fd, const KeptResults& k);
// Every readable record in the base directory (one that cannot be parsed is skipped).
std::vector<KeptResults> load_kept(int base_fd);
// Removes the record of `dir` (absent is fine).
void remove_kept(int base_fd, const std::string& dir);

// The line for people: "the results stay on node N in PATH until TIME (REASON); `stagehand
// stage-out retry J` copies them again".
std::string kept_line(const KeptResults& k, const std::string& base_path, const std::string& node);
// Their `until`, as people read it (UTC, ISO 8601).
std::string until_text(const KeptResults& k);
// The state `stagehand status` shows for them: "stage-out failed, kept until TIME: REASON".
std::string kept_state(const KeptResults& k);

} // namespace stagehand::stageout
