// Copying one --stage-out entry from the job's scratch directory to DEST, as the calling user (the
// caller has dropped to the job user). Below DEST nothing is followed: every entry is made
// fd-relative with O_NOFOLLOW, symlinks are copied as symlinks, and each file and symlink is made
// under a temporary name and renamed into place, so a reader never sees half a file.
#pragma once

#include "stagehand/stageout/spec.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stagehand::stageout {

inline constexpr const char* k_log_name = ".stagehand-stage-out.log";

// In the job's directory: the job's first node (where entries without %n are copied) is marked by
// the job's own task, which knows the node list (the epilog does not): $SLURM_TMPDIR/.stagehand/NAME.
inline constexpr const char* k_first_node_marker = "stage-out-first-node";
Status mark_first_node(int tmpdir_fd);
bool is_first_node(int tmpdir_fd);

struct EntryResult
{
  std::string src;             // as in the spec
  std::string dest;            // absolute, expanded
  std::uint64_t files = 0;     // regular files copied
  std::uint64_t symlinks = 0;
  std::uint64_t skipped = 0;   // devices, FIFOs, sockets
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::string error;           // empty: copied completely
  std::string log_dir;         // the directory whose log got (or should get) the line
};

// Copies `spec` (SRC below `tmpdir_fd`) to the absolute `dest`, stopping with an error at `until`.
// DEST's missing parents are created; what exists at DEST is merged into (files replaced whole).
EntryResult copy_entry(int tmpdir_fd, const OutSpec& spec, const std::string& dest,
                       std::chrono::steady_clock::time_point until);

// The entry's line: "SRC -> DEST: N files, B bytes, S s" or "... not copied: REASON".
std::string summary(const EntryResult& r);

// Appends "TIME job J node N: LINE" to LOG in the entry's log directory, else in `fallback_dir`;
// returns the log file written, or an empty string.
std::string append_log(const EntryResult& r, const std::string& fallback_dir, std::uint32_t job_id,
                       const std::string& node);
// Appends "TIME job J node N: TEXT" to LOG in the first of `dirs` that takes it; the file written.
std::string append_log_line(const std::vector<std::string>& dirs, std::uint32_t job_id, const std::string& node,
                            const std::string& text);
// Where an entry for `dest` logs: DEST when it is a directory, then its parent.
std::vector<std::string> log_dirs_of(const std::string& dest);

} // namespace stagehand::stageout
