// A miss's lane: a pipe the daemon makes large enough for the whole source, which the read moves
// its page references into (splice(2) from pipe to pipe: no copy) instead of copying every byte
// into a spool file beside the job's own unpacking. The cache's fill unpacks the lane later, or
// as it fills (a job waits for the entry). Memory the node holds until the fill has read it:
// bounded per lane and per node, else the spool file as before.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <atomic>
#include <cstdint>

namespace stagehand::cache {

inline constexpr std::uint64_t k_lane_max_bytes = 255ull << 20; // one source (a pipe of 256 MiB at most)
inline constexpr std::uint64_t k_lanes_max_bytes = 512ull << 20; // all a node holds at once

class Lane
{
public:
  // A lane for `bytes` (its write end non-blocking: a full lane is a dropped fill, never a
  // stalled job), counted in `held` while it lives; an error when it would take `held` past
  // `budget` or the kernel will not make a pipe that large (pipe sizes past fs.pipe-max-size
  // need CAP_SYS_RESOURCE: the daemon's).
  static Result<Lane> open(std::uint64_t bytes, std::atomic<std::uint64_t>& held, std::uint64_t budget);

  Lane(Lane&& other) noexcept;
  Lane& operator=(Lane&&) = delete;
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane();

  int read_fd() const { return m_rd.get(); }
  int write_fd() const { return m_wr.get(); }
  void close_write() { m_wr.reset(); } // once the read's child has it: its end is the lane's end
  std::uint64_t capacity() const { return m_capacity; }

private:
  Lane(UniqueFd rd, UniqueFd wr, std::uint64_t capacity, std::atomic<std::uint64_t>* held)
    : m_rd(std::move(rd)), m_wr(std::move(wr)), m_capacity(capacity), m_held(held)
  {
  }
  UniqueFd m_rd;
  UniqueFd m_wr;
  std::uint64_t m_capacity = 0;
  std::atomic<std::uint64_t>* m_held = nullptr; // null once moved from
};

} // namespace stagehand::cache
