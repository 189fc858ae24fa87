// stagehandd's stage and cache_view requests: the job and the caller's credentials checked, then
// one service::StageRequest (src/stagehand/service/stage_request.hpp) does the work.
#include "daemon.hpp"

#include "stagehand/service/stage_request.hpp"

namespace stagehand::daemon {

// The cache is not for the jobs of its own service user: processes running as that user could
// reach the fills it writes (docs/known-limits.md). Such a job stages without the daemon, saying why.
Status Daemon::not_the_service_users(const registry::JobRecord& job)
{
  std::lock_guard lock(m_shared.mutex);
  if (m_shared.service && job.uid == m_shared.service->uid) {
    return Error::refused("job " + std::to_string(job.job_id) + " runs as the node cache's service user (uid " +
                          std::to_string(job.uid) + "), whose jobs the cache does not serve");
  }
  return ok_status();
}

void Daemon::on_stage(const proto::Stage& r, const Peer& peer, Responder& out)
{
  auto job = job_for(r.job_id, peer);
  if (!job) {
    out.error(job.error());
    return;
  }
  if (auto st = not_the_service_users(*job); !st) {
    out.error(st.error()); // the job's staging goes on without the daemon, with this line
    return;
  }
  ipc::Credentials user;
  if (peer.root()) {
    auto c = ipc::credentials_of(job->uid, job->gid);
    if (!c) {
      out.error(c.error());
      return;
    }
    user = *c;
  } else {
    // The task's own credentials, as the kernel reports them for the connection.
    user = ipc::Credentials{peer.uid, peer.gid, peer.groups, "uid " + std::to_string(peer.uid), {}};
  }
  // The job's work (unpacking a miss into its directory, say) on its own cores, where staging
  // without the daemon would run, not on another job's.
  user.cpus = service::job_cpus(peer);
  service::StageRequest run(m_shared, m_fills, *job, user, r, out);
  run.execute();
}

void Daemon::on_cache_view(const proto::CacheView& r, const Peer& peer, Responder& out)
{
  if (!peer.root()) {
    out.error(Error::refused("cache_view: only root may ask"));
    return;
  }
  auto job = job_for(r.job_id, peer);
  if (!job) {
    out.error(job.error());
    return;
  }
  if (!not_the_service_users(*job)) {
    {
      std::lock_guard lock(m_shared.mutex);
      m_shared.mark_viewed_locked(job->job_id, service::k_viewed_kept);
    }
    out.result(proto::CacheViewReply{std::vector<proto::ViewEntry>(r.sources.size())}); // no hits: staged as above
    return;
  }
  auto user = ipc::credentials_of(job->uid, job->gid);
  if (!user) {
    out.error(user.error());
    return;
  }
  user->cpus = service::job_cpus(peer); // the step's slurmstepd: the job's cores under a cpuset
  proto::Stage as_stage{r.job_id, r.sources, 0};
  service::StageRequest run(m_shared, m_fills, *job, *user, as_stage, out);
  out.result(proto::CacheViewReply{run.find_hits(r.claimed, r.progress_interval)});
}

} // namespace stagehand::daemon
