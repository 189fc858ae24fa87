// Archive extraction: libarchive's reader feeding ArchiveWriter (fd-relative, writer threads).
#include "stagehand/archive/extract.hpp"

#include "stagehand/archive/archive_writer.hpp"
#include "stagehand/archive/new_file.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/task_pool.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <memory>

namespace stagehand::archive {

namespace {

struct ArchiveCloser
{
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<struct archive, ArchiveCloser>;

// Only the formats and filters stagehand promises; everything else is "not an archive".
// `block`: bytes per read of the archive (a probe needs only the first header: a small read
// keeps it from pulling a megabyte off shared storage per look).
Result<ArchivePtr> open_reader(int fd, std::size_t block = 1 << 20)
{
  // A pipe (a directory streamed by the user side of the cache) cannot and need not be rewound.
  if (::lseek(fd, 0, SEEK_SET) != 0 && errno != ESPIPE) {
    return Error::from_errno("cannot rewind the archive");
  }
  ArchivePtr a(archive_read_new());
  if (!a) {
    return Error{ErrorKind::internal, ENOMEM, "cannot allocate an archive reader"};
  }
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_zstd(a.get());
  if (archive_read_open_fd(a.get(), fd, block) != ARCHIVE_OK) {
    return Error::corrupt(archive_error_string(a.get()) ? archive_error_string(a.get()) : "cannot read");
  }
  return a;
}

unsigned writer_threads(const ExtractLimits& limits)
{
  if (limits.writer_threads == 1) {
    return 0; // the reader writes everything itself
  }
  if (limits.writer_threads > 1) {
    return limits.writer_threads;
  }
  return TaskPool::per_core();
}

Result<ExtractStats> extract_entries(struct archive* a, int dest_fd, const ExtractLimits& limits)
{
  (void)current_umask(); // read once before any writer thread starts
  ArchiveWriter writer(dest_fd, limits, writer_threads(limits));
  for (;;) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF) {
      break;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const char* msg = archive_error_string(a);
      return writer.abandon(Error::corrupt(std::string("corrupt archive: ") + (msg ? msg : "read error")));
    }
    if (auto st = writer.entry(a, e); !st) {
      return writer.abandon(st.error());
    }
  }
  if (auto st = writer.finish(); !st) {
    return writer.abandon(st.error());
  }
  return writer.stats();
}

} // namespace

Result<ArchiveKind> probe_archive(int fd)
{
  auto a = open_reader(fd, 64 << 10);
  ArchiveKind kind = ArchiveKind::not_an_archive;
  if (a) {
    struct archive_entry* e = nullptr;
    // ARCHIVE_WARN: readable with a remark (a pax header whose UTF-8 name this locale cannot show).
    if (const int r = archive_read_next_header(a->get(), &e); r == ARCHIVE_OK || r == ARCHIVE_WARN) {
      kind = ArchiveKind::archive;
    }
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    return Error::from_errno("cannot rewind");
  }
  return kind;
}

Result<ExtractStats> extract_archive(int archive_fd, int dest_fd, const ExtractLimits& limits,
                                     const std::string& source)
{
  auto a = open_reader(archive_fd);
  if (!a) {
    return a.error().with_context(source);
  }
  auto stats = extract_entries(a->get(), dest_fd, limits);
  if (!stats) {
    return stats.error().with_context(source); // the archive's name, once
  }
  return stats;
}

} // namespace stagehand::archive
