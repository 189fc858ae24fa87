// The reads of sources under way on a node (single flight): one job reads a source the cache does
// not hold, and the jobs asking for it meanwhile wait for that read (its entry, or its spool) instead
// of reading it again. cache/stage_plan decides what a job does; this is the table it looks in.
#pragma once

#include "stagehand/cache/spool.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/ipc/shared_memory.hpp"
#include "stagehand/util/fd.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::service {

// A cache fill that follows a miss's spool as the read writes it, so that the entry is ready
// about when the job's own copy is, for the jobs waiting for it. Started by the daemon's fill thread
// (a child outlives no request thread: its parent-death signal is its parent thread's); the miss
// gives its verdict on the spool through `verdict`, and hands it to the fill thread with the spool,
// or abandons it.
struct FollowFill
{
  UniqueFd dir;       // the fill's directory (its own descriptor)
  bool tree = false;  // a directory's tar stream, else an archive's bytes
  std::uint64_t room = 0;
  std::string source; // the canonical path, for messages
  std::optional<ipc::SharedMemory<cache::SpoolVerdict>> verdict;
  // Guarded by the lock that guards the table:
  std::optional<ipc::Child> child; // once started
  bool abandoned = false;          // the miss ended without a spool worth filling from
};

// One read in progress; requests for the same key wait for it: for the entry, or (once the source
// has been read whole) for the spool to deliver from. Guarded by the lock that guards the table.
struct FillWait
{
  bool done = false;
  bool published = false;
  std::uint32_t job_id = 0; // the job whose request reads
  std::shared_ptr<UniqueFd> spool_dir; // set once the spool holds the whole source: the fill's directory
  std::chrono::milliseconds read_time{0}; // how long the read took: how long a waiter waits for the entry
  std::chrono::steady_clock::time_point patience_until{}; // set with spool_dir: the end of that wait, for every waiter
  std::condition_variable cv;
  std::uint64_t progress = 0;                        // the fill's bytes: read (a file), written (a directory)
  std::chrono::steady_clock::time_point progressed;  // when it last moved (or a directory's entries did)
  // While the leader reads: its fill, to start following the spool when a second job waits (a
  // fill beside the leader's own copy competes with it for cores; only a crowd gains from it).
  std::shared_ptr<FollowFill> follow;
  bool follow_asked = false;
  // The fill thread has started this read's fill (a lone miss's fill may wait for idle CPUs first):
  // until then a job asking for the entry has its patience counted from its asking.
  bool fill_started = false;
};

// The table of reads under way, by cache key, and the claims jobs starting together make on a
// source nobody reads yet (cache_view at task start). Not locked itself: every call is made with the
// one lock its owner guards it with, the lock `await_begin` waits on.
class ReadsUnderWay
{
public:
  using Clock = std::chrono::steady_clock;

  // The read of `key` under way, if any.
  std::shared_ptr<FillWait> find(const std::string& key) const;
  // The read under way of the first of `keys` that has one, if any.
  std::shared_ptr<FillWait> find_any(const std::vector<std::string>& keys) const;
  // This caller reads `key` now: jobs waiting for a read to begin see it, and a claim on
  // `claimed_as` (the source's own key, which a job made at task start) is settled.
  std::shared_ptr<FillWait> begin(const std::string& key, const std::string& claimed_as, Clock::time_point now);
  // The read `wait` of `key` is over: forgotten, unless another read of `key` has replaced it.
  void end(const std::string& key, const std::shared_ptr<FillWait>& wait);
  // A job starting says it will read `key`: true when no other job's claim younger than
  // `claims_last` stands (claims older than that are forgotten).
  bool claim(const std::string& key, Clock::time_point now, Clock::duration claims_last);
  // Waits, on `lock` (the owner's), until a read of one of `keys` is under way or `until` passes;
  // that read, or none.
  std::shared_ptr<FillWait> await_begin(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                                        Clock::time_point until);

private:
  std::map<std::string, std::shared_ptr<FillWait>> m_reads;
  std::map<std::string, Clock::time_point> m_claims;
  std::condition_variable m_began; // a read began
};

} // namespace stagehand::service
