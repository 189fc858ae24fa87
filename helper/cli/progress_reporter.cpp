// stage-run's progress lines and progress record.
#include "progress_reporter.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdio>

namespace stagehand::cli {

namespace {

constexpr auto k_tick = std::chrono::milliseconds(500);
constexpr auto k_record_every = std::chrono::seconds(2);
constexpr const char* k_record_tmp = "progress.new";

} // namespace

void print_progress(const std::string& node, const proto::Progress& p)
{
  std::printf("stagehand: %s: %s\n", node.c_str(), stage::progress_text(p).c_str());
  std::fflush(stdout);
}

ProgressReporter::ProgressReporter(std::string node, std::chrono::seconds interval, int state_fd,
                                   const stage::ProgressBoard& board)
  : m_node(std::move(node)), m_interval(interval), m_state_fd(state_fd), m_board(board)
{
  // own thread: the CLI's, which no spawn_as child runs (scripts/thread-starts.sh)
  m_thread = std::thread([this] { loop(); });
}

ProgressReporter::~ProgressReporter()
{
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_cv.notify_all();
  m_thread.join();
  (void)::unlinkat(m_state_fd, stage::k_progress_record, 0);
  (void)::unlinkat(m_state_fd, k_record_tmp, 0);
}

void ProgressReporter::loop()
{
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto next_line = t0 + m_interval;
  auto next_record = t0 + k_record_every;
  std::unique_lock lock(m_mutex);
  while (!m_cv.wait_for(lock, k_tick, [this] { return m_stop; })) {
    const auto now = Clock::now();
    const bool line_due = m_interval.count() > 0 && now >= next_line;
    const bool record_due = now >= next_record;
    if (!line_due && !record_due) {
      continue;
    }
    auto p = m_board.snapshot();
    if (!p) {
      continue; // between sources
    }
    if (line_due) {
      print_progress(m_node, *p);
      next_line = now + m_interval;
    }
    if (record_due) {
      write_record(*p);
      next_record = now + k_record_every;
    }
  }
}

// Written beside and renamed into place: stagehandd never reads half a record.
void ProgressReporter::write_record(const proto::Progress& p)
{
  UniqueFd fd(::openat(m_state_fd, k_record_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid() || !fs::write_all(fd.get(), stage::progress_record(p), k_record_tmp)) {
    return; // best effort: the lines in the job's output do not depend on it
  }
  (void)::renameat(m_state_fd, k_record_tmp, m_state_fd, stage::k_progress_record);
}

} // namespace stagehand::cli
