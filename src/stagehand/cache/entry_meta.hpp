// What a cache entry's manifest says about it.
#pragma once

#include "stagehand/stage/kinds.hpp"

#include <cstdint>
#include <string>

namespace stagehand::cache {

struct EntryMeta
{
  std::string key;
  std::string source;      // canonical path it was filled from
  stage::SourceKind kind = stage::SourceKind::file; // manifest "shape"
  stage::Placement how = stage::Placement::copied;
  std::uint64_t files = 0; // regular files (hard links counted once per name)
  std::uint64_t bytes = 0; // file data
  std::uint64_t disk_bytes = 0; // what the entry occupies (st_blocks of everything in it)
  std::int64_t created = 0;
  std::int64_t last_used = 0;   // the manifest's mtime
};

} // namespace stagehand::cache
