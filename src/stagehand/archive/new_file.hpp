// The one routine that writes an unpacked file: created fresh in its parent directory's fd
// (O_EXCL|O_NOFOLLOW, replacing a file or symlink already there, never writing through it), data
// written at offsets, then the size (a sparse tail), mode and mtime. The reader's large files
// and the writer threads' small ones both go through it.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace stagehand::archive {

struct FileMeta
{
  std::uint64_t size = 0; // declared size: a file whose data ends earlier is extended (sparse)
  mode_t mode = 0;        // permission bits only: never setuid, setgid or sticky
  struct timespec mtime {};
};

// Writes `len` bytes at `offset` of the file being made.
using BlockSink = std::function<Status(const char* data, std::size_t len, std::uint64_t offset)>;

// Makes `name` in `parent` and calls `fill` with a sink for its data. `shown` names the file in
// errors (its path in the archive).
Status write_new_file(int parent, const char* name, std::string_view shown, const FileMeta& meta,
                      const std::function<Status(const BlockSink&)>& fill);

// The same for a file whose data is all in memory (`data` from offset 0): a writer thread's small
// file, with no callback per file.
Status write_new_file(int parent, const char* name, std::string_view shown, const FileMeta& meta,
                      std::string_view data);

// Removes a non-directory entry at `name` so a later entry replaces it (tar's semantics); a
// directory is never replaced.
Status make_room(int parent, const char* name, std::string_view shown);

// The process umask, read once without calling umask() (which changes it and is not
// thread-safe). Call it before starting threads that write files.
mode_t current_umask();

} // namespace stagehand::archive
