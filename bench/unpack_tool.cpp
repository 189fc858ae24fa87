// bench helper: unpack ARCHIVE into an existing DEST with stagehand's extractor and print stats.
// WRITER_THREADS: 0 one per core (the default), 1 the reader writes everything.
#include "stagehand/stage/extract.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv)
{
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: unpack_tool ARCHIVE DEST [WRITER_THREADS]\n");
    return 2;
  }
  stagehand::stage::ExtractLimits limits;
  if (argc == 4) {
    limits.writer_threads = static_cast<unsigned>(std::atoi(argv[3]));
  }
  stagehand::UniqueFd in(::open(argv[1], O_RDONLY | O_CLOEXEC));
  stagehand::UniqueFd out(::open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!in.valid() || !out.valid()) {
    std::perror("open");
    return 1;
  }
  auto r = stagehand::stage::extract_archive(in.get(), out.get(), limits, argv[1]);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  std::printf("files=%llu dirs=%llu bytes=%llu\n", static_cast<unsigned long long>(r->files),
              static_cast<unsigned long long>(r->dirs), static_cast<unsigned long long>(r->bytes));
  return 0;
}
