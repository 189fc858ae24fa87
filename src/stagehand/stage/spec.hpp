// --stage-data=SRC[:DEST[:copy]][,...]: the grammar, the destinations, and the checks made as
// the user at submit time (and again on the node).
//
// Grammar: specs are separated by ',', fields by ':'; a backslash makes the next character
// literal ("\,", "\:", "\\", "\~"). A source that starts with an unescaped '~' is expanded as
// the shell would ("~/x": the user's home, "~name/x": name's home; an unknown name stays as
// written). The canonical form (canonical_option) escapes every name, so any name round-trips.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stage {

// Whether a leading '~' of the source is the shell's (unescaped) or part of the name ("\~").
enum class Tilde { literal, expand };

// Where a destination comes from: the user, or the source's name (the canonical form's ":auto":
// the node drops an archive suffix only when the content turns out to be an archive it unpacks).
enum class DestFrom { user, source_name };

struct StageSpec
{
  std::string src;      // unescaped (relative to the submit directory, absolute, or "~...")
  std::string dest;     // relative to SLURM_TMPDIR; empty: derived from src
  Unpack unpack = Unpack::if_archive;
  Tilde tilde = Tilde::literal;
  DestFrom dest_from = DestFrom::user;
  bool operator==(const StageSpec&) const = default;
};

// A name with the grammar's special characters ('\\', ',', ':') escaped.
std::string escape_spec_field(std::string_view name);

// `src` with a leading "~" or "~name" replaced by that home directory, as the shell would
// (for the calling user: $HOME, else the password database). Unchanged for Tilde::literal or an
// unknown name.
std::string expand_tilde(std::string_view src, Tilde tilde);

// Parses the option value. Errors name the offending spec.
Result<std::vector<StageSpec>> parse_stage_option(std::string_view value);

// `name` without an archive suffix (.tar, .tar.gz/.tgz, .tar.bz2/.tbz2, .tar.xz/.txz,
// .tar.zst/.tzst, .zip); unchanged when it has none.
std::string strip_archive_suffix(std::string_view name);

// A source after the checks: canonical absolute path, kind, size, final destination.
struct CheckedSource
{
  std::string shown;     // as the user wrote it, for messages
  std::string path;      // canonical absolute path
  std::string dest;      // normalised, relative to SLURM_TMPDIR
  SourceKind kind = SourceKind::file;
  Unpack mode = Unpack::if_archive;
  bool unpack = false;   // a regular file whose content is an archive, without ":copy"
  bool decided = true;   // false: a file whose content was not looked at (no probe)
  DestFrom dest_from = DestFrom::user;
  std::string named_dest; // `dest` before an archive suffix was dropped
  std::uint64_t bytes = 0; // file size, or the sum of a directory's regular files
};

// Says whether the regular file open at the fd is an archive to unpack (by content).
using ArchiveProbe = std::function<bool(int fd)>;

// Checks every spec as the calling user (identical specs, after resolving, count once): the source exists and is readable (a directory: every
// file below it), lies under [stage] allowed_roots when set, destinations are relative, without
// "..", and do not overlap, and the total is at most [stage] max_bytes. `base_dir` resolves
// relative sources. With a `probe`, `unpack` says what the content is; without one (the plugin,
// which must not load libarchive into sbatch/srun), a file's default destination drops an archive
// suffix of its name and the node decides by content. The error is one line naming the source
// and the reason.
Result<std::vector<CheckedSource>> check_sources(const std::vector<StageSpec>& specs, const std::string& base_dir,
                                                 const StageConfig& config, const ArchiveProbe& probe = nullptr);

// Canonical specs ("ABS_SRC:DEST[:copy|:auto]", comma-separated, every name escaped) that the node
// side re-checks. ":auto" marks a file destination named after the source whose content the
// caller did not look at: the node drops the archive suffix only if it unpacks.
std::string canonical_option(const std::vector<CheckedSource>& sources);

} // namespace stagehand::stage
