// The kinds every layer shares, defined once: what a --stage-data source is, whether an archive
// is unpacked, and how a source was placed. The option grammar, the submit-time checks, the
// protocol, the cache's keys and manifests, the view records and the staging all use these; their
// words (in JSON, keys, records and summary lines) are the ones below, and nowhere else.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stagehand::stage {

// What a source is: a regular file (an archive or not) or a directory. Words: "file", "dir".
enum class SourceKind { file, dir };

// Whether an archive is unpacked: ":copy" copies an archive as it is. Words: "auto", "never".
enum class Unpack { if_archive, never };

// How a source was placed: copied as it is (a file, a directory's tree) or an archive unpacked.
// Words: "copied", "unpacked" (the first word of a summary line).
enum class Placement { copied, unpacked };

// The outermost name a placement created below the job's directory (DEST, or the first of its
// parents that was missing), as it was when created: its inode, so that undoing the placement
// removes that name only while it still holds what this placement made, never a directory another
// step of the job made at the same moment. `rel` empty: nothing recorded.
struct CreatedName
{
  std::string rel;
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const CreatedName&) const = default;
};

// What placing a source made: how, and its regular files and their bytes (a staging's, a
// delivery's from the node daemon, a cache fill's), and for a delivery what it created.
struct Placed
{
  Placement how = Placement::copied;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  CreatedName created{};
  bool operator==(const Placed&) const = default;
};

// Whether a job was submitted with --stage-data (its prolog sees the option in the job's
// environment). A job without it is not counted among those about to ask for their sources at
// task start; where the prolog cannot tell (an older plugin, a Prolog= script), it is "yes".
// Words: "stage_data": true / false in the protocol's register and in the registry file.
enum class StagingAsked { yes, no };

const char* name_of(SourceKind k);
const char* name_of(Unpack u);
const char* name_of(Placement p);
std::optional<SourceKind> source_kind_named(std::string_view word);
std::optional<Unpack> unpack_named(std::string_view word);
std::optional<Placement> placement_named(std::string_view word);

} // namespace stagehand::stage
