// stage-run's reporter: while staging runs in this process, a thread prints a progress line to
// the job's output every [stage] progress_interval (none for a staging shorter than that) and
// keeps $SLURM_TMPDIR/.stagehand/progress current for `stagehand status` (read by stagehandd).
#pragma once

#include "stagehand/stage/progress.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace stagehand::cli {

// "stagehand: NODE: staging SRC: 42%, ...": printed and flushed at once.
void print_progress(const std::string& node, const proto::Progress& p);

class ProgressReporter
{
public:
  // `state_fd`: the job's .stagehand directory (borrowed; outlives the reporter). An interval of
  // 0 prints no lines; the record is kept either way.
  ProgressReporter(std::string node, std::chrono::seconds interval, int state_fd, const stage::ProgressBoard& board);
  ~ProgressReporter(); // stops the thread and removes the record
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

private:
  void loop();
  void write_record(const proto::Progress& p);

  std::string m_node;
  std::chrono::seconds m_interval;
  int m_state_fd;
  const stage::ProgressBoard& m_board;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_stop = false;
  std::thread m_thread; // own thread: the CLI's
};

} // namespace stagehand::cli
