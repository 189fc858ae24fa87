// Unpacking an archive (tar, tar.gz/.bz2/.xz/.zst, zip) into a directory without ever writing
// outside it. libarchive only reads; every write is ours, fd-relative.
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>

namespace stagehand::archive {

// The permission bits unpacked files get: the archive's (setuid, setgid and sticky always
// dropped), or those without group/other write (the node cache's files: root's once published, so
// that only root writes them; a cache view shows the job their modes as its own).
enum class FileModes { from_archive, read_only };

struct ExtractLimits
{
  std::uint64_t max_bytes = 2ULL << 40;      // file data written, in total
  std::uint64_t max_entries = 10'000'000ULL; // entries read
  unsigned writer_threads = 0; // small-file writers: 0 one per core (up to 4); 1 none (reader writes)
  FileModes file_modes = FileModes::from_archive;
  WorkCounters* counters = nullptr; // kept up to date when set
};

struct ExtractStats
{
  std::uint64_t files = 0;
  std::uint64_t dirs = 0;
  std::uint64_t symlinks = 0;
  std::uint64_t hardlinks = 0;
  std::uint64_t skipped_special = 0; // devices, FIFOs, sockets: never created
  std::uint64_t bytes = 0;
};

enum class ArchiveKind { not_an_archive, archive };

// Looks at the content (not the name) of the file open at `fd` and says whether it is one of the
// archive formats stagehand unpacks. Leaves the file offset at 0.
Result<ArchiveKind> probe_archive(int fd);

// Unpacks the archive open at `archive_fd` into the directory `dest_fd`. Entry names must be
// relative without ".."; every directory on an entry's way is opened with O_NOFOLLOW, so no entry
// can write through a symlink made by an earlier one; hard links must point at regular files
// already unpacked; devices, FIFOs and sockets are skipped; setuid/setgid/sticky bits are dropped;
// ownership is never restored; the limits stop archive bombs. `source` names the archive in
// errors. On error, what was written stays: the caller removes the destination.
Result<ExtractStats> extract_archive(int archive_fd, int dest_fd, const ExtractLimits& limits,
                                     const std::string& source);

} // namespace stagehand::archive
