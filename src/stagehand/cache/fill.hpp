// Service side of the cache: runs in a child as the unprivileged service user ([daemon] user), so
// the parsing of user-controlled archives never happens as root. Writes the entry's data into a
// fill directory with the hostile-proof extractor, then makes every file read-only.
#pragma once

#include "stagehand/cache/key.hpp"
#include "stagehand/util/result.hpp"

#include "stagehand/stage/extract.hpp"

#include <cstdint>
#include <string>

namespace stagehand::cache {

struct FillResult
{
  std::string how; // "copied" | "unpacked"
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};

// A regular file source open at `src_fd`: unpacked when its content is an archive (and `unpack`
// allows), else copied, into `fill_dir_fd`/data. `max_bytes` bounds the bytes written.
Result<FillResult> fill_from_file(int src_fd, int fill_dir_fd, UnpackMode unpack, std::uint64_t max_bytes,
                                  const std::string& shown);

// A directory source arriving as a tar stream (from the user side) on `stream_fd`; `counters`,
// when given, follow the unpacking.
Result<FillResult> fill_from_stream(int stream_fd, int fill_dir_fd, std::uint64_t max_bytes, const std::string& shown,
                                    stage::WorkCounters* counters = nullptr);

} // namespace stagehand::cache
