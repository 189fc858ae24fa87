// The daemon's record of the jobs on its node: who owns each job directory, whether the job is
// still running here, which cache entries it uses. Pure data with a JSON form; the daemon owns
// the one instance and persists it atomically after every change.
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::registry {

enum class JobState { running, ended };

struct JobRecord
{
  std::uint32_t job_id = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  JobState state = JobState::running;
  std::int64_t registered_at = 0; // epoch seconds
  std::int64_t ended_at = 0;
  std::int64_t keep_until = 0;      // --tmpdir=keep: the directory stays until then
  std::set<std::string> cache_keys; // entries materialised into the job's directory
  std::set<std::string> view_keys;  // of those, the ones shown as cache views (their files are the entry's)
  std::uint64_t staged_bytes = 0;   // what the daemon wrote into its directory, all requests together
  stage::StagingAsked staging = stage::StagingAsked::yes; // submitted with --stage-data (or not known)
};

class Registry
{
public:
  // The prolog ran (again, for a requeued job): a fresh running record.
  void register_job(const JobRecord& record);
  // The epilog ran.
  void end_job(std::uint32_t job_id, std::int64_t now, std::int64_t keep_until);
  void forget(std::uint32_t job_id);
  // `key` is used by the job: linked (its files are links: they outlive the entry) or shown as a
  // view (the entry's own files: removing them empties the view).
  enum class KeyUse { linked, viewed };
  void add_cache_key(std::uint32_t job_id, const std::string& key, KeyUse use = KeyUse::linked);
  // Counts `bytes` staged for the job, unless that takes it past `limit` ([stage] max_bytes is per
  // job, whatever number of requests it sends): then nothing is counted and the answer is false.
  bool charge(std::uint32_t job_id, std::uint64_t bytes, std::uint64_t limit);
  // Running records slurmctld's word ends: jobs not in `running_here` (squeue's answer for this
  // node, asked at `asked_at`) that have no slurmstepd here either and were registered before the
  // question. Their end_job was missed (an epilog that could not reach the daemon); until they end,
  // their cache entries stay pinned. No answer from slurmctld: call nothing, keep them all.
  std::vector<std::uint32_t> ended_by_slurmctld(const std::set<std::uint32_t>& running_here,
                                                const std::set<std::uint32_t>& live_steps,
                                                std::int64_t asked_at) const;

  // Ended records that may go: ended more than `max_age` seconds before `now`, and past the
  // `max_ended` most recent ended ones; never one whose directory is kept (keep_until not past).
  // The file stays small however many jobs a node runs in a day (it is rewritten at every job's
  // start and end, and read back at the daemon's start within a limit).
  std::vector<std::uint32_t> forgettable(std::int64_t now, std::int64_t max_age, std::size_t max_ended) const;

  const JobRecord* find(std::uint32_t job_id) const;
  const std::map<std::uint32_t, JobRecord>& jobs() const { return m_jobs; }
  // Whether a job still running here uses the cache entry (a lookup, however many jobs and keys).
  bool key_in_use(const std::string& key) const;
  // Whether a job still running here shows the cache entry as a view.
  bool key_viewed(const std::string& key) const;

  std::string to_json() const;
  static Result<Registry> from_json(std::string_view text);

private:
  void pin(const JobRecord& job);
  void unpin(const JobRecord& job);

  std::map<std::uint32_t, JobRecord> m_jobs;
  std::map<std::string, std::uint32_t> m_pinned; // key -> running jobs that use it
  std::map<std::string, std::uint32_t> m_viewed; // key -> running jobs that show it as a view
};

inline constexpr const char* k_registry_file = "registry.json";

// Loads the registry from `state_dir_fd` (an empty one when there is none yet).
Result<Registry> load(int state_dir_fd);
// Persists it: temp file, fsync, rename, fsync of the directory.
Status save(int state_dir_fd, const Registry& registry);

} // namespace stagehand::registry
