// stagehandd's stage request: its life (job directory, progress frames, waiting on children,
// rollback, pins); each source is stage_source.cpp's (identified in
// stage_identify.cpp, a miss read in stage_miss.cpp), cache_view's hits stage_view.cpp's.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/archive/entry_path.hpp"
#include "stagehand/tmpdir/job_dir.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace stagehand::service {

StageRequest::StageRequest(Node& node, FillThread& fills, const registry::JobRecord& job, ipc::Credentials user,
                           const proto::Stage& request, Responder& out)
  : m_node(node), m_fills(fills), m_job(job), m_user(std::move(user)), m_request(request), m_out(out)
{
}

void StageRequest::execute()
{
  std::uint64_t request_limit = 0;
  {
    std::lock_guard lock(m_node.mutex);
    m_store = m_node.keeper.store(); // ours for the whole request, even if a reload replaces it
    m_job_limit = m_node.config.stage.max_bytes;
    request_limit = std::min(m_request.max_bytes, m_job_limit); // never above the site's
  }
  auto job_fd = open_job_dir();
  if (!job_fd) {
    log_failure(job_fd.error());
    m_out.error(job_fd.error());
    return;
  }
  m_job_fd = std::move(*job_fd);
  m_staging_id = m_node.stagings.open(m_job.uid);
  proto::StageReply reply;
  auto refuse = [&](Error e, std::uint64_t earlier) {
    if (e.kind == ErrorKind::limit && earlier > 0) { // [stage] max_bytes is the job's, not the request's
      e.message += "; job " + std::to_string(m_job.job_id) + " staged " + std::to_string(earlier) +
                   " bytes on node " + m_node.name + " through the daemon already, and [stage] max_bytes (" +
                   std::to_string(m_job_limit) + ") counts all of a job's stagings";
    }
    rollback();
    finish_staging();
    e = e.with_context("--stage-data");
    log_failure(e);
    m_out.error(e);
  };
  for (const auto& src : m_request.sources) {
    if (client_left()) {
      refuse(Error::io("the client went away before " + src.shown, EPIPE), 0);
      return;
    }
    const std::uint64_t earlier = job_staged(); // by the job's other requests
    const std::uint64_t job_left = m_job_limit > earlier ? m_job_limit - earlier : 0;
    m_max_bytes = std::min(request_limit, m_total + job_left);
    auto staged = stage_one(src);
    if (!staged) {
      refuse(staged.error(), earlier);
      return;
    }
    reply.staged.push_back(*staged);
  }
  // Counted once, whole: a concurrent request of the same job may have taken the room meanwhile.
  if (auto earlier = charge_job(); earlier) {
    refuse(Error::limit(std::to_string(m_total) + " bytes staged by this request, more than the " +
                        std::to_string(m_job_limit > *earlier ? m_job_limit - *earlier : 0) +
                        " left under [stage] max_bytes (limit)"),
           *earlier);
    return;
  }
  finish_staging();
  m_out.result(reply);
}

// The daemon's log says it too (the job's helper stages without the daemon for every kind but
// corrupt): as a warning where the node or the daemon failed (io, internal, config; io includes
// a job's own full scratch), as news where the job asked for what it cannot have.
void StageRequest::log_failure(const Error& e) const
{
  const bool node_side = e.kind == ErrorKind::io || e.kind == ErrorKind::internal || e.kind == ErrorKind::config;
  spdlog::log(node_side ? spdlog::level::warn : spdlog::level::info, "job {}: {}", m_job.job_id, e.message);
}

Result<UniqueFd> StageRequest::open_job_dir()
{
  auto base = m_node.open_base();
  if (!base) {
    return base.error();
  }
  // Not into a mount the job made on its directory: a hung FUSE server would hold this thread.
  auto opened = fs::open_beneath(base->get(), tmpdir::job_dir_name(m_job.job_id), O_RDONLY | O_DIRECTORY);
  UniqueFd fd = opened ? std::move(*opened) : UniqueFd();
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Error::refused("job " + std::to_string(m_job.job_id) + " has no directory on node " + m_node.name);
  }
  if (st.st_uid != m_job.uid) {
    return Error::refused("the directory of job " + std::to_string(m_job.job_id) + " is not the job user's");
  }
  return fd;
}

std::uint64_t StageRequest::job_staged() const
{
  const auto rec = m_node.registry.find(m_job.job_id);
  return rec ? rec->staged_bytes : 0;
}

std::optional<std::uint64_t> StageRequest::charge_job()
{
  std::optional<std::uint64_t> over; // what the job had staged, when this would take it past its limit
  m_node.registry.change(
    [&](registry::Registry& reg) {
      if (reg.charge(m_job.job_id, m_total, m_job_limit)) {
        return RegistryKeeper::Changed::yes;
      }
      const auto* rec = reg.find(m_job.job_id);
      over = rec ? rec->staged_bytes : 0;
      return RegistryKeeper::Changed::no;
    },
    RegistryKeeper::Save::soon);
  return over;
}

void StageRequest::finish_staging()
{
  if (m_staging_id) {
    m_node.stagings.close(*m_staging_id);
  }
}

std::unique_lock<std::mutex> StageRequest::node_lock_for_a_moment()
{
  std::unique_lock lock(m_node.mutex, std::try_to_lock);
  for (int i = 0; !lock.owns_lock() && i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    (void)lock.try_lock();
  }
  return lock;
}

void StageRequest::fill_alive()
{
  auto lock = node_lock_for_a_moment();
  if (lock.owns_lock() && m_fill_wait) {
    m_fill_wait->progressed = std::chrono::steady_clock::now();
  }
}

void StageRequest::record_progress(const proto::Progress& p)
{
  if (m_staging_id) { // a staging; cache_view's keepalives are no staging (status never lists them)
    m_node.stagings.report(*m_staging_id, p); // (their own lock)
  }
  auto lock = node_lock_for_a_moment(); // for the jobs waiting on this read
  if (lock.owns_lock() && m_fill_wait) {
    if (p.done_bytes != m_fill_wait->progress) {
      m_fill_wait->progressed = std::chrono::steady_clock::now();
    }
    m_fill_wait->progress = p.done_bytes;
  }
}

void StageRequest::progress(const proto::Progress& p)
{
  record_progress(p);
  m_out.progress(p);
}

Result<ipc::Message> StageRequest::await(ipc::Child& child, const std::function<proto::Progress()>& status,
                                         Frames frames)
{
  auto give_up = [&](Error e) -> Result<ipc::Message> {
    child.kill();
    return e;
  };
  for (;;) {
    auto m = ipc::receive_message(child.sock(), std::chrono::duration_cast<std::chrono::milliseconds>(k_keepalive));
    if (m) {
      return m;
    }
    if (m.error().code != ETIMEDOUT) {
      return give_up(m.error().code == EPIPE ? child.why_closed(m.error()) : m.error()); // out of memory, refused
    }
    if (child.stopped()) {
      return give_up(Error::io("the staging process was stopped (SIGSTOP)", EINTR));
    }
    if (frames == Frames::none) {
      record_progress(status());
      continue;
    }
    progress(status());
    if (client_left()) {
      return give_up(Error::io("the client went away", EPIPE)); // the job gave up: stop working for it
    }
  }
}

void StageRequest::made(const stage::CreatedName& created)
{
  if (!created.rel.empty()) {
    m_made.push_back(created);
  }
}

void StageRequest::rollback()
{
  if (client_left()) {
    spdlog::info("job {}: its client stopped waiting: what this request placed is left to the job's own staging",
                 m_job.job_id);
    m_made.clear();
    return;
  }
  for (auto it = m_made.rbegin(); it != m_made.rend(); ++it) {
    const auto slash = it->rel.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : it->rel.substr(0, slash);
    const std::string name = slash == std::string::npos ? it->rel : it->rel.substr(slash + 1);
    auto fd = fs::open_beneath(m_job_fd.get(), parent, O_RDONLY | O_DIRECTORY);
    struct stat st {};
    if (fd && ::fstatat(fd->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == it->dev &&
        st.st_ino == it->ino) {
      (void)fs::remove_tree(fd->get(), name);
    }
  }
  m_made.clear();
}

StageRequest::~StageRequest()
{
  if (m_view_read && m_view_read->thread.joinable()) {
    m_view_read->thread.join(); // a read handed over to the job's staging: its spool reaches the fill thread first
  }
  for (const auto& key : m_pinned) {
    m_node.keeper.unpin(key);
  }
}


} // namespace stagehand::service
