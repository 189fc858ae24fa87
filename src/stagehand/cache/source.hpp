// User side of the cache: runs in a child with the job user's uid, gid and groups, so a source is
// only ever opened and read with the user's own rights. Nothing here parses file contents.
#pragma once

#include "stagehand/cache/key.hpp"
#include "stagehand/stage/source.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <optional>
#include <string>
#include <vector>

namespace stagehand::cache {

// stage::open_source for the daemon's user side, errors naming the source as `shown`.
Result<UniqueFd> open_source(const std::string& path, const std::string& shown, stage::SourceKind expected,
                             const std::vector<std::string>& allowed_roots = {});
// The same of a source whose kind the descriptor decides (`expected` nullopt: a file or a directory).
Result<stage::OpenedSource> open_source_as(const std::string& path, const std::string& shown,
                                           std::optional<stage::SourceKind> expected,
                                           const std::vector<std::string>& allowed_roots = {});

struct StreamResult
{
  SourceIdentity identity; // of what was streamed
  bool changed = false;    // a file changed while it was read
};

// Writes the directory open at `dir_fd` as a pax tar stream to `out_fd` (files, directories,
// symlinks; devices, FIFOs and sockets are skipped), computing its identity on the way.
Result<StreamResult> stream_tree(int dir_fd, int out_fd, const std::string& canonical_path, const std::string& shown);

} // namespace stagehand::cache
