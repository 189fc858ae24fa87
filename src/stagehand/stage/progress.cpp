// Progress of a running staging: board, line and record.
#include "stagehand/stage/progress.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/fs/offset.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/util/units.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace stagehand::stage {

void ProgressBoard::begin(const std::string& source, int fd, std::uint64_t total)
{
  std::lock_guard lock(m_mutex);
  m_active = true;
  m_source = source;
  m_fd = fd;
  m_done = nullptr;
  m_total = total;
  m_t0 = std::chrono::steady_clock::now();
}

void ProgressBoard::begin(const std::string& source, std::function<std::uint64_t()> done, std::uint64_t total)
{
  std::lock_guard lock(m_mutex);
  m_active = true;
  m_source = source;
  m_fd = -1;
  m_done = std::move(done);
  m_total = total;
  m_t0 = std::chrono::steady_clock::now();
}

void ProgressBoard::end()
{
  std::lock_guard lock(m_mutex);
  m_active = false;
  m_fd = -1;
  m_done = nullptr;
}

std::optional<proto::Progress> ProgressBoard::snapshot() const
{
  std::lock_guard lock(m_mutex); // held while the offset is read: end() waits, the descriptor is still ours
  if (!m_active) {
    return std::nullopt;
  }
  proto::Progress p;
  p.source = m_source;
  p.total_bytes = m_total;
  if (m_fd >= 0) {
    p.done_bytes = fs::file_offset(m_fd);
  } else if (m_done) {
    p.done_bytes = m_done();
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  return p;
}

std::string progress_text(const proto::Progress& p)
{
  char buf[256];
  const double rate = p.seconds > 0 ? static_cast<double>(p.done_bytes) / p.seconds : 0;
  if (p.total_bytes > 0) {
    const std::uint64_t done = std::min(p.done_bytes, p.total_bytes);
    const double pct = 100.0 * static_cast<double>(done) / static_cast<double>(p.total_bytes);
    char left[32] = "time left unknown"; // also when more came than measured (files that grew)
    if (rate > 0 && p.done_bytes <= p.total_bytes) {
      std::snprintf(left, sizeof left, "%.0f s left", std::ceil(static_cast<double>(p.total_bytes - done) / rate));
    }
    std::snprintf(buf, sizeof buf, ": %.0f%%, %s of %s, %s/s, %s", std::floor(pct), human_bytes(done).c_str(),
                  human_bytes(p.total_bytes).c_str(), human_bytes(static_cast<std::uint64_t>(rate)).c_str(), left);
  } else {
    std::snprintf(buf, sizeof buf, ": %.0f s so far, size unknown", p.seconds);
  }
  return "staging " + p.source + buf;
}

std::string progress_record(const proto::Progress& p)
{
  return nlohmann::json{{"source", p.source},
                        {"done_bytes", p.done_bytes},
                        {"total_bytes", p.total_bytes},
                        {"seconds", p.seconds}}
    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<proto::Progress> parse_progress_record(std::string_view text)
{
  if (text.size() > k_max_progress_record) {
    return Error::corrupt("progress record too large");
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::corrupt("progress record is not a JSON object");
  }
  auto s = j.find("source");
  auto d = j.find("done_bytes");
  auto t = j.find("total_bytes");
  auto secs = j.find("seconds");
  if (s == j.end() || !s->is_string() || d == j.end() || !d->is_number_unsigned() || t == j.end() ||
      !t->is_number_unsigned() || secs == j.end() || !secs->is_number() || secs->get<double>() < 0) {
    return Error::corrupt("progress record lacks source, done_bytes, total_bytes or seconds");
  }
  return proto::Progress{s->get<std::string>(), d->get<std::uint64_t>(), t->get<std::uint64_t>(), secs->get<double>()};
}

std::optional<proto::Progress> read_progress_record(int job_dir_fd)
{
  auto fd = fs::open_beneath(job_dir_fd, std::string(k_state_dir) + "/" + k_progress_record, O_RDONLY | O_NONBLOCK);
  struct stat st {};
  if (!fd || ::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > static_cast<off_t>(k_max_progress_record) ||
      st.st_mtime + k_progress_record_stale.count() < std::time(nullptr)) {
    return std::nullopt;
  }
  auto text = fs::read_all(fd->get(), k_progress_record, k_max_progress_record);
  if (!text) {
    return std::nullopt;
  }
  auto p = parse_progress_record(*text);
  if (!p) {
    return std::nullopt;
  }
  return *p;
}

} // namespace stagehand::stage
