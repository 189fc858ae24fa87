// Whole-file replacement that survives kill -9 and power loss: write a temporary file, fsync it,
// rename it over the name, fsync the directory (leveldb's CURRENT, systemd's write_string_file).
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <string>
#include <string_view>

namespace stagehand::fs {

enum class Durability { fsync, none }; // none: for files that are rebuilt anyway (metrics)

Status write_file_atomic(int dir_fd, const std::string& name, std::string_view data, mode_t mode,
                         Durability durability = Durability::fsync);

// Reads a whole small regular file below `dir_fd` (O_NOFOLLOW); ENOENT is an io error with that code.
Result<std::string> read_small_file(int dir_fd, const std::string& name, std::size_t max_bytes = 16U << 20);

} // namespace stagehand::fs
