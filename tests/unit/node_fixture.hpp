// One node's base directory for the unit tests of the job directory's life (prolog, epilog, GC):
// a `Config` whose base is a temporary directory, no daemon listening, and GC passes run as
// `stagehand gc` or the daemon runs them.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/fs/mounts.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include "test_support.hpp"

#include <chrono>
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stagehand::test {

inline constexpr tmpdir::JobOwner k_job{555, k_attacker_uid, k_attacker_gid};

struct Node
{
  TempDir dir;
  Config config;
  std::string base;
  Node()
  {
    config.tmpdir.base = dir / "scratch/%n";
    config.tmpdir.keep_for = std::chrono::seconds(1);
    config.daemon.socket = dir / "no-daemon.sock";
    base = dir / "scratch/n1";
  }
  static tmpdir::JobContext job(const tmpdir::JobOwner& owner = k_job) { return {owner, "n1"}; }
  std::string job_dir(std::uint32_t id = k_job.job_id) const { return base + "/job_" + std::to_string(id); }
  UniqueFd base_fd() const
  {
    auto fd = fs::open_trusted_dir(base, fs::CreateMissing::no);
    return fd ? std::move(*fd) : UniqueFd();
  }
  // One GC pass as `stagehand gc` or the daemon runs it.
  gc::Applied gc(const gc::Evidence& evidence, std::time_t now = std::time(nullptr)) const
  {
    UniqueFd fd = base_fd();
    auto snap = gc::snapshot_base(fd.get(), now);
    EXPECT_TRUE(snap);
    return gc::apply(fd.get(), gc::make_plan(*snap, evidence), std::chrono::steady_clock::now() + std::chrono::minutes(5));
  }
  // One GC pass where slurmctld says no job runs on the node and nothing is being copied out.
  gc::Applied gc(std::time_t now = std::time(nullptr)) const
  {
    gc::Evidence e;
    e.running_here = std::set<std::uint32_t>{};
    e.pending_stage_outs = std::set<std::string>{};
    return gc(e, now);
  }
  std::set<std::string> trash() const
  {
    std::set<std::string> out;
    UniqueFd fd = base_fd();
    auto snap = gc::snapshot_base(fd.get(), 0);
    if (!snap) {
      ADD_FAILURE() << snap.error().message;
      return out;
    }
    for (const auto& e : snap->entries) {
      if (e.name.starts_with(".trash.")) {
        out.insert(e.name);
      }
    }
    return out;
  }
};

// The mount points at or below `dir` (from /proc/self/mountinfo, which asks no filesystem anything).
inline std::vector<std::string> mounts_below(const std::string& dir)
{
  std::vector<std::string> out;
  for (const auto& m : fs::parse_mountinfo(read_file("/proc/self/mountinfo"))) {
    if (m.point == dir || m.point.starts_with(dir + "/")) {
      out.push_back(m.point);
    }
  }
  return out;
}

} // namespace stagehand::test
