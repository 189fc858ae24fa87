// Opening a --stage-data source, the one way every path does it: the submit-time check, staging in
// the job, and the daemon's user side.
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <optional>
#include <string>
#include <vector>

namespace stagehand::stage {

struct OpenedSource
{
  UniqueFd fd;    // blocking again after the checks
  struct stat st; // of the descriptor
  bool is_dir() const { return S_ISDIR(st.st_mode); }
};

// Opens `path` once with O_NONBLOCK | O_NOFOLLOW (a FIFO swapped in cannot hang us, a symlink
// swapped in is not followed) and decides on the descriptor: a FIFO, device or socket is refused at
// once; `expected`, when given, must match; with `allowed_roots`, the path the descriptor really
// has (/proc/self/fd) must lie under one, so a rename or symlink swap of a parent after an earlier
// check cannot escape them. Errors are refusals whose message is the reason alone (callers name
// the source) and whose code is the errno (ENOENT: it is gone).
Result<OpenedSource> open_source(const std::string& path, std::optional<SourceKind> expected,
                                 const std::vector<std::string>& allowed_roots = {});

// Whether `path` is `root` or below it (whole components).
bool path_under(const std::string& path, const std::string& root);

} // namespace stagehand::stage
