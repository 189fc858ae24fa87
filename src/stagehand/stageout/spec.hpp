// --stage-out=SRC[:DEST][,...]: the grammar, DEST's expansion (%j, %n) and the checks made as the
// user at submit time. SRC is relative to SLURM_TMPDIR (a file, a directory, or a glob in its last
// component); DEST is relative to the submit directory or absolute (default: SRC there).
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stageout {

struct OutSpec
{
  std::string src;  // relative to SLURM_TMPDIR, normalised ("ckpt", "out/*.pt")
  std::string dest; // as written (may hold %j and %n); empty: src under the submit directory
  bool operator==(const OutSpec&) const = default;
};

// Parses the option value. Errors are one line naming the offending entry.
Result<std::vector<OutSpec>> parse_option(std::string_view value);

// Whether SRC's last component is a glob pattern (*, ? or [).
bool is_glob(std::string_view src);

// Whether DEST names the node (%n): such an entry copies on every node, the others on the first.
bool per_node(const OutSpec& spec);

// DEST as an absolute, normalised path: %j and %n replaced ("%%" is a literal '%'), relative to
// `submit_dir`; the default is SRC under `submit_dir` (a glob's directory part).
std::string dest_path(const OutSpec& spec, const std::string& submit_dir, std::uint32_t job_id, const std::string& node);

// Checks every entry as the calling user: DEST's deepest existing ancestor (the part before any
// %j/%n) is a directory the user can write and search, and DEST itself, when it exists, is a
// directory for a directory or glob SRC. Errors are one line naming the entry and the reason.
Status check_at_submit(const std::vector<OutSpec>& specs, const std::string& submit_dir);

// "SRC:ABSOLUTE_DEST,..." with %j/%n kept: what the epilog copies, whatever its working directory.
std::string canonical_option(const std::vector<OutSpec>& specs, const std::string& submit_dir);

} // namespace stagehand::stageout
