// libFuzzer target: the extractor on arbitrary archive bytes (tar, gzip/bzip2/xz/zstd, zip).
// Probing and unpacking into a fresh directory never crash, never write outside it, and stay
// within the limits. The directory is emptied after each input.
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace stagehand;

namespace {

// A private directory for this process: DIR/out is the destination, DIR/sentinel must stay.
struct Sandbox
{
  std::string dir;
  Sandbox()
  {
    char tmpl[] = "/tmp/stagehand-extract-fuzz.XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::abort();
    }
    dir = tmpl;
    std::FILE* f = std::fopen((dir + "/sentinel").c_str(), "w");
    if (!f) {
      std::abort();
    }
    std::fclose(f);
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  static Sandbox box;
  UniqueFd in(::memfd_create("archive", MFD_CLOEXEC));
  if (!in.valid() || ::write(in.get(), data, size) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  (void)archive::probe_archive(in.get());
  const std::string out = box.dir + "/out";
  if (::mkdir(out.c_str(), 0700) != 0) {
    std::abort();
  }
  {
    UniqueFd dest(::open(out.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    archive::ExtractLimits limits;
    limits.max_bytes = 1 << 20;
    limits.max_entries = 1000;
    limits.writer_threads = 1;
    auto stats = archive::extract_archive(in.get(), dest.get(), limits, "fuzz");
    if (stats && (stats->bytes > limits.max_bytes || stats->files > limits.max_entries)) {
      std::abort();
    }
  }
  UniqueFd parent(::open(box.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (::fstatat(parent.get(), "sentinel", &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    std::abort(); // something replaced what lies beside the destination
  }
  if (!fs::remove_tree(parent.get(), "out")) {
    std::abort();
  }
  return 0;
}
