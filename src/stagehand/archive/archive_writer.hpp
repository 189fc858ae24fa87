// The extractor's writing side: one archive entry at a time, fd-relative below the destination.
// Names are checked first (split_entry_path), every directory on the way is opened O_NOFOLLOW
// (fs::DirCache), and small files go to writer threads. Errors do not name the archive: the
// caller (extract_archive) adds that once.
#pragma once

#include "stagehand/fs/dir_cache.hpp"
#include "stagehand/archive/new_file.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/util/hash_set.hpp"
#include "stagehand/util/task_pool.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::archive {

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

  // An entry of the archive, named: its directory below the destination ("a/b", "" for the
  // destination), its name there, and its path ("a/b/name") for errors and the conflict check.
  struct Entry
  {
    std::string rel;
    std::string name;
    std::string shown;
    std::vector<std::string> parts; // the directories of `rel`, unless in_last_dir
    bool in_last_dir = false;       // in m_last_dir
  };
  // Checks the entry's name and fills `cur`; false for "." or "./" (the destination itself).
  // Entries come grouped by directory: a name in the same directory as the last entry's, spelled
  // the same way, reuses that directory's checked parts and open handle.
  Result<bool> name_entry(std::string_view raw, Entry& cur);
  // Opens (makes where missing) the entry's directory.
  Result<fs::SharedFd> open_parent(std::string_view raw, const Entry& cur);

  // The entry (cur.name in `parent`) as a directory, a file streamed by the reader, a small file
  // for the writer threads, a symlink or a hard link.
  Status directory(const Entry& cur, int parent, struct archive_entry* e);
  Status regular_file(const Entry& cur, struct archive* a, int parent, struct archive_entry* e);
  Status queue_file(const Entry& cur, struct archive* a, fs::SharedFd parent, struct archive_entry* e,
                    std::uint64_t path_hash);
  // Hands the current batch to the writer threads.
  void flush_batch();
  // Waits until every queued file is written; the first error of any.
  Status drain();
  // Whether this entry touches a path a queued file may still be writing: the entry itself, a
  // directory on its way, or a hard link's target. Such an entry waits for the writers.
  bool touches_queued(std::string_view dir, std::uint64_t path_hash, const char* link_target);
  bool dir_touches_queued(std::string_view dir) const; // `dir` or a directory above it
  Status symlink(const Entry& cur, int parent, const char* target);
  Status hardlink(const Entry& cur, int parent, const char* target);

  // Feeds each data block of the entry to `sink`, counting bytes against the limit.
  template<typename Sink> Status read_blocks(const Entry& cur, struct archive* a, Sink&& sink);

  ExtractLimits m_limits;
  ExtractStats m_stats;
  std::uint64_t m_entries = 0;
  fs::DirCache m_dirs;
  // Batch buffers the writer threads are done with, for the next batches: a fresh buffer per
  // batch would cost its page faults every time. Declared before m_pool: it outlives the threads.
  class SpareBuffers
  {
  public:
    std::string take();
    void give(std::string bytes);

  private:
    std::mutex m_mutex;
    std::vector<std::string> m_spare;
  };
  SpareBuffers m_spare;
  TaskPool m_pool;
  // Small files handed to a writer thread together: their names, paths and data back to back in
  // one buffer (one allocation per batch, not three per file).
  struct Batch
  {
    struct File
    {
      std::size_t dir;   // in `dirs`
      std::size_t name;  // offset in `bytes` of the name, NUL-terminated
      std::size_t shown; // then its path in the archive (for errors), NUL-terminated
      std::size_t data;  // then its data
      std::size_t data_len;
      FileMeta meta;
    };
    std::vector<fs::SharedFd> dirs; // one per run of files in the same directory
    std::vector<File> files;
    std::string bytes;
    std::size_t data_bytes = 0;
    Status write() const; // on a writer thread
  };
  Batch m_batch; // not yet handed over
  const UniqueFd* m_lane_dir = nullptr; // the directory of the last batch handed over (identity only)
  std::size_t m_lane = 0;               // its writer's lane: one per directory, in turn
  HashSet m_queued;                 // hashes of the paths queued since the last drain
  std::optional<std::string> m_clear_dir; // a directory none of whose ancestors is in m_queued
  std::vector<DirTimes> m_dir_times;
  // The current entry, named by name_entry and passed to the methods that place it (kept here so
  // that its strings' buffers serve every entry).
  Entry m_entry;
  // The last entry's directory as the archive spelled it ("./a/b/"), and what it resolved to.
  struct LastDir
  {
    std::string spelled;
    std::string rel;
    fs::SharedFd fd;
  };
  std::optional<LastDir> m_last_dir;
};

} // namespace stagehand::archive
