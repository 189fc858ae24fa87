// Service side of the cache: runs in a child as the unprivileged service user ([daemon] user), so
// the parsing of user-controlled archives never happens as root. Writes the entry's data into a
// fill directory with the hostile-proof extractor, then makes every file read-only.
#pragma once

#include "stagehand/cache/key.hpp"
#include "stagehand/util/result.hpp"

#include "stagehand/archive/extract.hpp"

#include <cstdint>
#include <ctime>
#include <sys/types.h>
#include <string>

namespace stagehand::cache {

using FillResult = stage::Placed;

// What decides whether a finished fill is published.
struct PublishCheck
{
  bool read_as_keyed = true;      // every file read had the stat its key was made from, before and after
  std::int64_t newest_ns = 0;     // the source's latest mtime or ctime (SourceIdentity::newest_ns)
  struct timespec started {};     // read before the source was identified
  std::uint64_t fill_bytes = 0;   // on disk
  std::uint64_t cache_max_bytes = 0;
};

// "" when the fill may be published; else why not, for the job's summary line (the fill is then
// used for that job only): the source changed during or just before the fill (changed_near), or
// the fill is larger than the whole cache.
std::string publish_refusal(const PublishCheck& c);

// A regular file source open at `src_fd`: unpacked when its content is an archive (and `unpack`
// allows), else copied, into `fill_dir_fd`/data. `max_bytes` bounds the bytes written.
Result<FillResult> fill_from_file(int src_fd, int fill_dir_fd, stage::Unpack unpack, std::uint64_t max_bytes,
                                  const std::string& shown);

// A spool that already is a plain copy of a file source (no archive to unpack): it becomes the
// fill's data as it is, with the mode any cached file keeps (`mode`, the source's, without
// group/other write), as fill_from_file gives a copied file. Nothing is forked:
// the spool's bytes are the file's.
Result<FillResult> fill_from_plain_spool(int fill_dir_fd, const char* spool_name, mode_t mode);

// A directory source arriving as a tar stream (from the user side) on `stream_fd`; `counters`,
// when given, follow the unpacking.
Result<FillResult> fill_from_stream(int stream_fd, int fill_dir_fd, std::uint64_t max_bytes, const std::string& shown,
                                    archive::WorkCounters* counters = nullptr);

// An archive arriving as a stream on `stream_fd` (a file source's bytes as its spool is written:
// the fill follows the read): unpacked into `fill_dir_fd`/data, as fill_from_file unpacks it.
Result<FillResult> fill_from_archive_stream(int stream_fd, int fill_dir_fd, std::uint64_t max_bytes,
                                            const std::string& shown);

} // namespace stagehand::cache
