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


} // namespace stagehand::cache
