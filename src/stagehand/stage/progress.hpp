// Progress of a running staging: the board the staging thread updates and a reporter thread
// reads, the one line users see in the job's output, and the small record the staging helper
// keeps in $SLURM_TMPDIR/.stagehand so that stagehandd can show it in `stagehand status`.
#pragma once

#include "stagehand/proto/messages.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace stagehand::stage {

// The record's name in the job's state directory ($SLURM_TMPDIR/.stagehand/progress).
inline constexpr const char* k_progress_record = "progress";
// A record not rewritten for this long belongs to a staging that is gone.
inline constexpr std::chrono::seconds k_progress_record_stale{20};

class ProgressBoard
{
public:
  // Called by the staging thread for each source: `fd` is the open source file (its offset is
  // the bytes done: every copy and extraction path reads through it), -1 for a directory;
  // `total` is its size, 0 when unknown.
  void begin(const std::string& source, int fd, std::uint64_t total);
  // As above, with the bytes done told by `done` (e.g. the size of a copy being delivered); it
  // is called under the board's lock.
  void begin(const std::string& source, std::function<std::uint64_t()> done, std::uint64_t total);
  // Before the source's descriptor closes.
  void end();
  // From any thread: the current source, or nothing between sources.
  std::optional<proto::Progress> snapshot() const;

private:
  mutable std::mutex m_mutex;
  bool m_active = false;
  std::string m_source;
  int m_fd = -1;
  std::function<std::uint64_t()> m_done;
  std::uint64_t m_total = 0;
  std::chrono::steady_clock::time_point m_t0;
};

// begin() now, end() when it leaves scope (declare it after the descriptor it watches).
class ProgressScope
{
public:
  ProgressScope(ProgressBoard* board, const std::string& source, int fd, std::uint64_t total) : m_board(board)
  {
    if (m_board) {
      m_board->begin(source, fd, total);
    }
  }
  ProgressScope(ProgressBoard* board, const std::string& source, std::function<std::uint64_t()> done,
                std::uint64_t total)
    : m_board(board)
  {
    if (m_board) {
      m_board->begin(source, std::move(done), total);
    }
  }
  ~ProgressScope()
  {
    if (m_board) {
      m_board->end();
    }
  }
  ProgressScope(const ProgressScope&) = delete;
  ProgressScope& operator=(const ProgressScope&) = delete;

private:
  ProgressBoard* m_board;
};

// "staging SRC: 42%, 1.0 MiB of 2.4 MiB, 512.0 KiB/s, 3 s left" (or "... 12 s so far, 1.0 MiB
// done" when the total is unknown); the caller puts "stagehand: NODE: " in front.
std::string progress_text(const proto::Progress& p);

// The record: one JSON object (the protocol's progress fields), at most k_max_progress_record bytes.
inline constexpr std::size_t k_max_progress_record = 4096;
std::string progress_record(const proto::Progress& p);
Result<proto::Progress> parse_progress_record(std::string_view text);

// The record of a staging running in a job's directory (open at `job_dir_fd`), as root may read
// what the job user wrote: no symlink, no mount, no FIFO, a regular file of bounded size,
// rewritten within k_progress_record_stale. Nothing when there is none or it is not believable.
std::optional<proto::Progress> read_progress_record(int job_dir_fd);

} // namespace stagehand::stage
