// The extractor's writing side: one archive entry at a time, fd-relative below the destination.
// Names are checked first (split_entry_path), every directory on the way is opened O_NOFOLLOW
// (fs::DirCache), and small files go to writer threads. Errors do not name the archive: the
// caller (extract_archive) adds that once.
#pragma once

#include "stagehand/fs/dir_cache.hpp"
#include "stagehand/stage/new_file.hpp"
#include "stagehand/stage/extract.hpp"
#include "stagehand/util/hash_set.hpp"
#include "stagehand/util/task_pool.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stage {

class ArchiveWriter
{
public:
  static constexpr std::size_t k_small_file = 1U << 20;   // files up to this size go to writer threads
  static constexpr std::size_t k_queue_bytes = 64U << 20; // data buffered for writer threads, at most
  // Small files go to the writer threads in batches (one hand-over, not one per file). A batch
  // ends at this many files, bytes or directories; each queued batch costs at least
  // k_queue_bytes / k_max_queued_batches, so the directory descriptors held are bounded.
  static constexpr std::size_t k_batch_files = 256;
  static constexpr std::size_t k_batch_bytes = 1U << 20;
  static constexpr std::size_t k_batch_dirs = 4;
  static constexpr std::size_t k_max_queued_batches = 16;
  // Paths remembered for the conflict check between two drains, at most (then a drain).
  static constexpr std::size_t k_max_remembered = 1U << 20;

  // `threads` writer threads for small files (0: the reader writes everything itself).
  ArchiveWriter(int dest_fd, const ExtractLimits& limits, unsigned threads);

  // Writes the entry `e` whose header was just read from `a`.
  Status entry(struct archive* a, struct archive_entry* e);

  // Waits for the writer threads, then sets the directories' modes and times.
  Status finish();

  // After `e` stopped the extraction: drops what waits for the writer threads, waits for those
  // running, and returns the first error (a writer thread's on an earlier entry, else `e`).
  Error abandon(Error e);

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
  Status queue_file(struct archive* a, fs::SharedFd parent, std::string name, struct archive_entry* e,
                    std::string shown);
  // Hands the current batch to the writer threads.
  void flush_batch();
  // Waits until every queued file is written; the first error of any.
  Status drain();
  // Whether this entry touches a path a queued file may still be writing: the entry itself, a
  // directory on its way, or a hard link's target. Such an entry waits for the writers.
  bool touches_queued(const std::string& dir, const std::string& path, const char* link_target);
  bool dir_touches_queued(std::string_view dir) const; // `dir` or a directory above it
  Status symlink(int parent, const std::string& name, const char* target, const std::string& shown);
  Status hardlink(int parent, const std::string& name, const char* target, const std::string& shown);

  // Feeds each data block of the current entry to `sink`, counting bytes against the limit.
  template<typename Sink> Status read_blocks(struct archive* a, const std::string& shown, Sink&& sink);

  ExtractLimits m_limits;
  ExtractStats m_stats;
  std::uint64_t m_entries = 0;
  fs::DirCache m_dirs;
  TaskPool m_pool;
  struct QueuedFile
  {
    fs::SharedFd parent;
    std::string name;
    std::string shown;
    FileMeta meta;
    std::string data;
  };
  std::vector<QueuedFile> m_batch; // not yet handed over
  std::size_t m_batch_bytes = 0;
  std::size_t m_batch_dirs = 0;
  const UniqueFd* m_lane_dir = nullptr; // the directory of the last batch handed over (identity only)
  std::size_t m_lane = 0;               // its writer's lane: one per directory, in turn
  HashSet m_queued;                 // hashes of the paths queued since the last drain
  std::optional<std::string> m_clear_dir; // a directory none of whose ancestors is in m_queued
  std::vector<DirTimes> m_dir_times;
};

} // namespace stagehand::stage
