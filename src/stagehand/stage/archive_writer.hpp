// The extractor's writing side: one archive entry at a time, fd-relative below the destination.
// Names are checked first (split_entry_path), every directory on the way is opened O_NOFOLLOW
// (fs::DirCache), and small files go to writer threads. Errors do not name the archive: the
// caller (extract_archive) adds that once.
#pragma once

#include "stagehand/fs/dir_cache.hpp"
#include "stagehand/stage/extract.hpp"
#include "stagehand/util/task_pool.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace stagehand::stage {

class ArchiveWriter
{
public:
  static constexpr std::size_t k_small_file = 1U << 20;   // files up to this size go to writer threads
  static constexpr std::size_t k_queue_bytes = 64U << 20; // data buffered for writer threads, at most
  // Each queued file holds its directory's descriptor: at most this many wait (bounded fds).
  static constexpr std::size_t k_max_queued_files = 64;

  // `threads` writer threads for small files (0: the reader writes everything itself).
  ArchiveWriter(int dest_fd, const ExtractLimits& limits, unsigned threads);

  // Writes the entry `e` whose header was just read from `a`.
  Status entry(struct archive* a, struct archive_entry* e);

  // Waits for the writer threads, then sets the directories' modes and times.
  Status finish();

  ExtractStats stats() const;

private:
  struct DirTimes
  {
    std::string path; // relative to the destination
    mode_t mode;
    struct timespec mtime;
  };

  Status directory(int parent, const std::string& path, const std::string& name, struct archive_entry* e);
  Status regular_file(struct archive* a, int parent, const std::string& name, struct archive_entry* e,
                      const std::string& shown);
  Status queue_file(struct archive* a, fs::SharedFd parent, const std::string& name, struct archive_entry* e,
                    const std::string& shown);
  Status symlink(int parent, const std::string& name, const char* target, const std::string& shown);
  Status hardlink(int parent, const std::string& name, const char* target, const std::string& shown);

  // Feeds each data block of the current entry to `sink`, counting bytes against the limit.
  template<typename Sink> Status read_blocks(struct archive* a, const std::string& shown, Sink&& sink);

  ExtractLimits m_limits;
  ExtractStats m_stats;
  std::uint64_t m_entries = 0;
  fs::DirCache m_dirs;
  TaskPool m_pool;
  std::unordered_set<std::string> m_queued; // small files handed to the pool, by path
  std::vector<DirTimes> m_dir_times;
};

} // namespace stagehand::stage
