// bench helper: stagehand's staging engine on one source, for timing against the usual tools.
//   stage_tool unpack ARCHIVE DEST [WRITER_THREADS]   (0: one per core, 1: the reader writes)
//   stage_tool copy-file SRC DEST_DIR NAME
//   stage_tool copy-tree SRC_DIR DEST_DIR
//   stage_tool take-over DIR      (root: a cache fill's seal, cache::take_over; prints the bytes)
#include "stagehand/cache/store.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>

#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace stagehand;

namespace {

// Opens PATH (a directory when DIR), or says why not and exits: the engine is handed only open fds.
UniqueFd open_or_exit(const char* path, int dir)
{
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC | dir));
  if (!fd.valid()) {
    std::fprintf(stderr, "stage_tool: %s: %s\n", path, std::strerror(errno));
    std::exit(1);
  }
  return fd;
}
UniqueFd open_dir(const char* path) { return open_or_exit(path, O_DIRECTORY); }
UniqueFd open_file(const char* path) { return open_or_exit(path, 0); }

int report(const Status& st)
{
  if (!st) {
    std::fprintf(stderr, "%s\n", st.error().message.c_str());
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv)
{
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "unpack" && (argc == 4 || argc == 5)) {
    archive::ExtractLimits limits;
    if (argc == 5) {
      limits.writer_threads = static_cast<unsigned>(std::atoi(argv[4]));
    }
    UniqueFd in = open_file(argv[2]);
    UniqueFd out = open_dir(argv[3]);
    auto r = archive::extract_archive(in.get(), out.get(), limits, argv[2]);
    return report(r ? ok_status() : Status(r.error()));
  }
  if (cmd == "copy-file" && argc == 5) {
    UniqueFd in = open_file(argv[2]);
    UniqueFd out = open_dir(argv[3]);
    stage::CopyStats stats;
    return report(stage::copy_file(in.get(), out.get(), argv[4], ~0ULL, stats, argv[2]));
  }
  if (cmd == "copy-tree" && argc == 4) {
    UniqueFd in = open_dir(argv[2]);
    UniqueFd out = open_dir(argv[3]);
    stage::CopyStats stats;
    return report(stage::copy_tree(in.get(), out.get(), ~0ULL, stats, argv[2]));
  }
  if (cmd == "take-over" && argc == 3) {
    UniqueFd dir = open_dir(argv[2]);
    auto used = cache::take_over(dir.get(), argv[2]);
    if (used) {
      std::printf("%llu\n", static_cast<unsigned long long>(*used));
    }
    return report(used ? ok_status() : Status(used.error()));
  }
  std::fprintf(stderr, "usage: stage_tool unpack ARCHIVE DEST [THREADS] | copy-file SRC DIR NAME | copy-tree SRC DIR"
                       " | take-over DIR\n");
  return 2;
}
