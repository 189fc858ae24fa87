// The one line the job's output gets per staged source. Apart from the staging run (run.cpp) so
// that the plugin, which writes it for a source shown as a cache view, links no archive code.
#pragma once

#include "stagehand/stage/kinds.hpp"

#include <cstdint>
#include <string>

namespace stagehand::stage {

// "unpacked SRC -> TMPDIR/DEST: N files, B in S s[, NOTE] (CACHE)".
std::string summary_line(Placement how, const std::string& shown, const std::string& tmpdir_path,
                         const std::string& dest, std::uint64_t files, std::uint64_t bytes, double seconds,
                         const std::string& cache, const std::string& note = "");

} // namespace stagehand::stage
