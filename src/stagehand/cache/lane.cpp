// A miss's lane (lane.hpp): a pipe sized for the whole source, its bytes counted against the node's.
#include "stagehand/cache/lane.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <limits>

namespace stagehand::cache {

namespace {

// What the lane must hold: the source's pages (a file is moved in whole pages but for its last; a
// pipe holds one page or part of one in each of its slots, size / page size of them), and some
// room besides. The kernel rounds the size up to a power of two pages.
std::uint64_t lane_size(std::uint64_t bytes) { return bytes + (64u << 10); }

} // namespace

Result<Lane> Lane::open(std::uint64_t bytes, std::atomic<std::uint64_t>& held, std::uint64_t budget)
{
  const std::uint64_t want = lane_size(bytes);
  if (want > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    return Error::limit("too large for a lane");
  }
  std::uint64_t now = held.load();
  do {
    if (now + want > budget) {
      return Error::limit("the node's lanes hold as much as they may");
    }
  } while (!held.compare_exchange_weak(now, now + want));
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    held.fetch_sub(want);
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  const int got = ::fcntl(wr.get(), F_SETPIPE_SZ, static_cast<int>(want));
  if (got < 0 || static_cast<std::uint64_t>(got) < want) {
    held.fetch_sub(want);
    return Error::from_errno("the lane's size");
  }
  if (::fcntl(wr.get(), F_SETFL, O_WRONLY | O_NONBLOCK) != 0) {
    held.fetch_sub(want);
    return Error::from_errno("the lane's write end");
  }
  return Lane(std::move(rd), std::move(wr), want, &held);
}

Lane::Lane(Lane&& other) noexcept
  : m_rd(std::move(other.m_rd)), m_wr(std::move(other.m_wr)), m_capacity(other.m_capacity), m_held(other.m_held)
{
  other.m_held = nullptr;
}

Lane::~Lane()
{
  m_wr.reset();
  m_rd.reset(); // the pages it held go with it
  if (m_held) {
    m_held->fetch_sub(m_capacity);
  }
}

} // namespace stagehand::cache
