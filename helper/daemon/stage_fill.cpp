// stagehandd's stage request, per source: the job user's side opens and identifies it (a child with
// their credentials), a hit is linked into the job's directory, a miss is read once and delivered
// (stage_miss.cpp), with the cache filled from the same read, published after the job has its data.
#include "stage_run.hpp"

#include "stagehand/proto/child_messages.hpp"
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/shared_memory.hpp"
#include "stagehand/archive/entry_path.hpp"
#include "stagehand/tmpdir/job_dir.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace stagehand::daemon {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Result<StageRun::Identified> StageRun::identify(const proto::SourceSpec& src, const std::function<double()>& seconds)
{
  std::vector<std::string> roots;
  {
    std::lock_guard lock(m_d.m_mutex);
    roots = m_d.m_config.stage.allowed_roots;
  }
  // A delivered copy of a file source is opened by the same child, below the job's directory.
  const bool copy_wanted = !src.delivered.empty() && src.kind == stage::SourceKind::file && m_job_fd.valid();
  std::vector<int> keep;
  if (copy_wanted) {
    keep.push_back(m_job_fd.get());
  }
  auto ident_child = ipc::spawn_as(m_user, keep, [&](int sock, const std::vector<int>& kept) {
    auto fd = cache::open_source(src.path, src.shown, src.kind, roots);
    if (!fd) {
      (void)ipc::send_message(sock, proto::child_failure(fd.error()));
      return 1;
    }
    auto id = src.kind == stage::SourceKind::dir ? cache::identify_tree(fd->get(), src.path, src.shown)
                                                       : cache::identify_file(fd->get(), src.path, src.unpack);
    if (!id) {
      (void)ipc::send_message(sock, proto::child_failure(id.error()));
      return 1;
    }
    // The delivered copy, when it is a regular file of the source's size: read in its place (the
    // content probed there too: not one more byte of the shared filesystem).
    UniqueFd copy;
    if (!kept.empty()) {
      struct stat st {};
      auto c = fs::open_beneath(kept[0], src.delivered, O_RDONLY | O_NONBLOCK);
      if (c && ::fstat(c->get(), &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) == id->bytes) {
        copy = std::move(*c);
      }
    }
    const int content_fd = copy.valid() ? copy.get() : fd->get();
    bool archive = false; // the content decides, as staging without the daemon does
    bool zip = false;
    if (src.kind == stage::SourceKind::file && src.unpack == stage::Unpack::if_archive) {
      auto kind = archive::probe_archive(content_fd);
      archive = kind && *kind == archive::ArchiveKind::archive;
      char magic[2] = {};
      zip = archive && ::pread(content_fd, magic, sizeof magic, 0) == 2 && magic[0] == 'P' && magic[1] == 'K';
    }
    std::vector<int> fds{fd->get()};
    if (copy.valid()) {
      fds.push_back(copy.get());
    }
    (void)ipc::send_message(
      sock, proto::child_message(proto::SourceIdentified{id->key, id->files, id->bytes, id->newest_ns, archive, zip}),
      fds);
    return 0;
  });
  if (!ident_child) {
    return ident_child.error();
  }
  auto ident_msg = await(*ident_child, [&] { return proto::Progress{src.shown, 0, 0, seconds()}; });
  if (ident_msg) {
    (void)ident_child->wait();
  }
  if (!ident_msg) {
    return ident_msg.error();
  }
  auto ident = proto::parse_child_message<proto::SourceIdentified>(ident_msg->text);
  if (!ident) {
    return ident.error();
  }
  if (ident_msg->fds.empty() || ident_msg->fds.size() > 2) {
    return Error::internal("the user side sent no descriptor");
  }
  UniqueFd src_fd = std::move(ident_msg->fds[0]);
  UniqueFd copy_fd = ident_msg->fds.size() == 2 ? std::move(ident_msg->fds[1]) : UniqueFd();
  if (copy_wanted && !copy_fd.valid()) {
    spdlog::info("job {}: {}: the broadcast's copy {} is not there or not the source's size: reading the source",
                 m_job.job_id, src.path, src.delivered);
  }
  cache::SourceIdentity identity{ident->key, ident->files, ident->bytes, ident->newest_ns};
  if (src.kind == stage::SourceKind::file) {
    // A file's key needs only fstat: taken here from the descriptor, not from the user's side.
    auto mine = cache::identify_file(src_fd.get(), src.path, src.unpack);
    if (!mine) {
      return mine.error();
    }
    identity = *mine;
  }
  Identified out;
  out.identity = identity;
  out.fd = std::move(src_fd);
  out.copy = std::move(copy_fd);
  out.archive = ident->archive;
  out.zip = ident->zip;
  return out;
}

Result<proto::StagedSource> StageRun::stage_one(const proto::SourceSpec& src)
{
  const auto t0 = Clock::now();
  // Read before anything of the source is: its entries must be older than this by the racy window
  // for the fill to be published (cache::changed_near).
  struct timespec started {};
  ::clock_gettime(CLOCK_REALTIME, &started);
  auto parts = archive::split_entry_path(src.dest);
  if (!parts || parts->empty() || std::string_view((*parts)[0]).starts_with(".stagehand")) {
    return Error::refused(src.shown + ": destination \"" + src.dest + "\" is not allowed");
  }
  const std::uint64_t room = m_max_bytes > m_total ? m_max_bytes - m_total : 0;
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // 1. As the job user: open the source and say what it is.
  auto found = identify(src, seconds);
  if (!found) {
    return found.error();
  }
  const double identified = seconds();
  UniqueFd src_fd = std::move(found->fd);
  UniqueFd copy_fd = std::move(found->copy);
  const cache::SourceIdentity identity = found->identity;
  const std::string& key = identity.key;
  // The entry this request would fill: bytes from the broadcast's copy are the user's word for the
  // source's, so they fill an entry for this user's jobs only.
  const std::string own_key = copy_fd.valid() ? cache::delivered_key(key, m_job.uid) : key;
  const std::uint64_t src_bytes = identity.bytes;
  if (src.kind == stage::SourceKind::dir && src_bytes > room) {
    return Error::limit(src.shown + ": " + std::to_string(src_bytes) + " bytes, more than the " +
                        std::to_string(room) + " left under [stage] max_bytes (limit)");
  }

  // 2. A hit, a delivery from another job's read, or our own read.
  proto::StagedSource out{src.shown, src.dest, stage::Placement::copied, 0, 0, 0, proto::CacheOutcome::hit, ""};
  Delivery delivery;
  delivery.src = &src;
  delivery.content = src.kind == stage::SourceKind::dir ? stage::StreamContent::tree
                     : found->archive                    ? stage::StreamContent::archive
                                                        : stage::StreamContent::plain_file;
  (void)::fstat(src_fd.get(), &delivery.file_stat);
  delivery.unpack = src.unpack;
  delivery.room = room;
  delivery.seek_first = found->zip;
  // What staging may create (and so remove again), looked at before anything is.
  const std::string created = stage::outermost_missing(m_job_fd.get(), src.dest);
  std::optional<stage::Delivered> delivered;
  std::string hit_key;
  for (int attempt = 0;; ++attempt) {
    std::unique_lock lock(m_d.m_mutex);
    if (!m_store || !m_d.m_service) {
      return Error::io("the node cache is off", ENOENT);
    }
    // The entry every job may use, else the one filled for this user from a broadcast's copy.
    auto meta = m_store->lookup(key);
    hit_key = key;
    if (!meta) {
      hit_key = cache::delivered_key(key, m_job.uid);
      meta = m_store->lookup(hit_key);
    }
    if (meta) {
      ++m_d.m_pins[hit_key];
      m_pinned.push_back(hit_key);
      out.how = meta->how;
      if (meta->bytes > room) {
        return Error::limit(src.shown + ": unpacks to " + std::to_string(meta->bytes) + " bytes, more than the " +
                            std::to_string(room) + " left under [stage] max_bytes (limit)");
      }
      break;
    }
    if (auto it = m_d.m_fills.find(own_key); it != m_d.m_fills.end() && attempt < 3) {
      auto wait = it->second;
      m_d.ask_follow_locked(*wait);
      while (!wait->done && !wait->spool_dir) {
        if (std::chrono::steady_clock::now() - wait->progressed > k_stalled_fill) {
          return Error::io("another job's read of this source has made no progress for " +
                             std::to_string(k_stalled_fill.count()) + " s",
                           ETIMEDOUT);
        }
        if (!wait->cv.wait_for(lock, k_keepalive, [&] { return wait->done || wait->spool_dir != nullptr; })) {
          const auto done = wait->progress;
          lock.unlock();
          progress(proto::Progress{src.shown, done, src_bytes, seconds()}); // waiting for another job's read
          lock.lock();
          if (m_out.broken()) {
            return Error::io("the client went away", EPIPE);
          }
        }
      }
      // The source is in the spool, the entry not made yet. Linking the entry costs a fraction of
      // unpacking again: wait for it about as long as the read took (a cache that keeps up fills
      // in that time), then deliver from the spool rather than wait on a slow cache disk.
      const auto patience = wait->patience_until;
      while (!wait->done && std::chrono::steady_clock::now() < patience) {
        if (!wait->cv.wait_until(lock, std::min(patience, std::chrono::steady_clock::now() + k_keepalive),
                                 [&] { return wait->done; })) {
          lock.unlock();
          progress(proto::Progress{src.shown, src_bytes, src_bytes, seconds()});
          lock.lock();
          if (m_out.broken()) {
            return Error::io("the client went away", EPIPE);
          }
        }
      }
      if (wait->done) {
        continue; // published: a hit; failed: read it ourselves
      }
      UniqueFd spool(::openat(wait->spool_dir->get(), cache::k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!spool.valid()) {
        wait->cv.wait_for(lock, k_keepalive, [&] { return wait->done; }); // just filled: a hit
        continue;
      }
      lock.unlock();
      auto got = deliver_from(spool.get(), delivery, seconds);
      if (!got) {
        return got.error().with_context(src.shown);
      }
      delivered = *got;
      out.cache = proto::CacheOutcome::miss;
      out.note = "delivered from another job's read";
      break;
    }
    // Ours to read, unless the job would rather broadcast it (the summary says nothing was staged).
    if (m_request.misses == proto::Misses::report && src.kind == stage::SourceKind::file && !copy_fd.valid()) {
      out.cache = proto::CacheOutcome::absent;
      out.seconds = seconds();
      return out;
    }
    auto wait = std::make_shared<FillWait>();
    wait->progressed = std::chrono::steady_clock::now();
    m_d.m_fills[own_key] = wait;
    m_d.m_view_claims.erase(key); // the claim, if this job made one at task start, is kept
    m_d.m_fills_cv.notify_all();
    m_fill_wait = wait;
    const ipc::Credentials service = *m_d.m_service;
    lock.unlock();
    auto missed = miss(delivery, src_fd.get(),
                       MissContext{identity, started, service, seconds, copy_fd.valid() ? copy_fd.get() : src_fd.get(),
                                   own_key});
    lock.lock();
    m_fill_wait.reset();
    wait->follow.reset(); // the read is over: a fill not started yet starts from the whole spool
    if (!missed || !missed->spool) {
      wait->done = true;
      wait->cv.notify_all();
      m_d.m_fills.erase(own_key);
      if (!missed) {
        return missed.error().with_context(src.shown);
      }
    } else {
      wait->spool_dir = std::make_shared<UniqueFd>(::fcntl(missed->spool->dir.get(), F_DUPFD_CLOEXEC, 0));
      wait->read_time = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(seconds() - identified));
      wait->patience_until = std::chrono::steady_clock::now() + wait->read_time + std::chrono::seconds(1);
      wait->cv.notify_all();
      SpoolFill task;
      task.store = m_store;
      task.fill = std::move(*missed->spool);
      task.key = own_key;
      task.source = src.path;
      task.tree = src.kind == stage::SourceKind::dir;
      task.plain = delivery.content == stage::StreamContent::plain_file;
      task.mode = delivery.file_stat.st_mode;
      task.spool_bytes = missed->spool_bytes;
      task.unpack = src.unpack;
      task.room = room;
      task.wait = wait;
      task.job_id = m_job.job_id;
      task.follow = std::move(missed->follow);
      m_d.queue_spool_fill_locked(std::move(task));
    }
    delivered = missed->delivered;
    out.cache = missed->spool ? proto::CacheOutcome::miss : proto::CacheOutcome::none;
    out.note = missed->why_uncached;
    break;
  }

  // 3. Into the job's directory: delivered already, or a hit's entry linked.
  const double obtained = seconds();
  if (delivered) {
    if (!created.empty()) {
      m_made.push_back(created);
    }
    out.how = delivered->how;
    out.files = delivered->files;
    out.bytes = delivered->bytes;
  } else {
    auto entry = m_store->open_entry(hit_key);
    if (!entry) {
      return entry.error();
    }
    auto placed = cache::materialise(entry->get(), cache::k_data_name, m_job_fd.get(), src.dest,
                                     cache::JobUser{m_job.uid, m_job.gid});
    if (!placed) {
      return placed.error().with_context(src.shown);
    }
    m_made.push_back(placed->created_top);
    out.files = placed->files;
    out.bytes = placed->bytes;
  }
  m_total += out.bytes;
  out.seconds = seconds();
  spdlog::info("job {}: {} ({}): {:.2f} s: identified in {:.2f} s, {} in {:.2f} s, linked in {:.2f} s", m_job.job_id,
               src.path, proto::outcome_name(out.cache), out.seconds, identified,
               out.cache == proto::CacheOutcome::hit ? "found" : "delivered", obtained - identified,
               out.seconds - obtained);
  std::lock_guard lock(m_d.m_mutex);
  if (out.cache == proto::CacheOutcome::hit) {
    ++m_d.m_counters.hits;
    (void)m_store->touch(hit_key, static_cast<std::int64_t>(std::time(nullptr)));
  } else if (out.cache == proto::CacheOutcome::miss) {
    ++m_d.m_counters.misses;
  }
  m_d.m_counters.staged_bytes += out.bytes;
  m_d.m_counters.staged_seconds += out.seconds;
  if (out.cache == proto::CacheOutcome::hit) { // linked: the job's files are the entry's
    m_d.m_registry.add_cache_key(m_job.job_id, hit_key);
    m_d.save_registry_locked();
  }
  return out;
}

} // namespace stagehand::daemon

namespace stagehand::daemon {

void StageRun::await_fill_for_view(std::unique_lock<std::mutex>& lock, const std::string& key, const std::string& shown)
{
  const std::string mine = cache::delivered_key(key, m_job.uid);
  auto reading = [&] {
    auto it = m_d.m_fills.find(key);
    return it != m_d.m_fills.end() ? it : m_d.m_fills.find(mine);
  };
  auto it = reading();
  if (it == m_d.m_fills.end()) {
    // Nobody reads it yet. Jobs that start together all ask here before any has begun to read:
    // the first is the one that will (it claims the source); the others wait, briefly, for its
    // read to begin, and then for its entry, as for any read under way.
    const auto now = Clock::now();
    std::erase_if(m_d.m_view_claims, [&](const auto& c) { return now - c.second > k_view_claim; });
    if (m_d.m_view_claims.emplace(key, now).second) {
      m_claimed = true;
      return; // ours to read
    }
    if (m_claimed) {
      return; // this job reads another source first: it never waits on a read that may wait on it
    }
    const auto until = now + k_view_claim_wait;
    while ((it = reading()) == m_d.m_fills.end() && Clock::now() < until) {
      m_d.m_fills_cv.wait_until(lock, until);
    }
    if (it == m_d.m_fills.end()) {
      return;
    }
  }
  // Another job is reading this source: its entry may be a moment away, and a view of it costs
  // this job nothing where a link or a delivery costs a pass over every file. Waited for: the
  // read (at most k_view_read_wait: a long read's waiters stage the usual way, with progress lines
  // in their output), then the entry, until the read's patience runs out (as stage requests do).
  auto wait = it->second;
  m_d.ask_follow_locked(*wait);
  const auto t0 = Clock::now();
  const auto read_deadline = t0 + k_view_read_wait;
  auto keepalive = [&] {
    lock.unlock();
    m_out.progress(proto::Progress{shown, 0, 0, std::chrono::duration<double>(Clock::now() - t0).count()});
    lock.lock();
  };
  while (!wait->done && !wait->spool_dir && Clock::now() < read_deadline) {
    if (!wait->cv.wait_until(lock, std::min(read_deadline, Clock::now() + k_keepalive),
                             [&] { return wait->done || wait->spool_dir != nullptr; })) {
      keepalive();
    }
  }
  while (wait->spool_dir && !wait->done && Clock::now() < wait->patience_until) {
    if (!wait->cv.wait_until(lock, std::min(wait->patience_until, Clock::now() + k_keepalive), [&] { return wait->done; })) {
      keepalive();
    }
  }
}

std::vector<proto::ViewEntry> StageRun::find_hits()
{
  {
    std::lock_guard lock(m_d.m_mutex);
    m_store = m_d.m_store;
  }
  std::vector<proto::ViewEntry> entries;
  const auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  for (const auto& src : m_request.sources) {
    proto::ViewEntry hit;
    auto found = identify(src, seconds);
    if (!found) { // root does not look at the source: a directory is asked for as a file first
      proto::SourceSpec other = src;
      other.kind = src.kind == stage::SourceKind::file ? stage::SourceKind::dir : stage::SourceKind::file;
      if (auto again = identify(other, seconds)) {
        found = std::move(again);
      }
    }
    if (!found) {
      spdlog::info("job {}: cache view: {}: {}", m_job.job_id, src.path, found.error().message);
    } else {
      std::unique_lock lock(m_d.m_mutex);
      std::string entry;
      auto look = [&] {
        entry = found->identity.key;
        auto m = m_store && m_d.m_service ? m_store->lookup(entry)
                                          : Result<cache::EntryMeta>(Error::io("the node cache is off", ENOENT));
        if (!m && m_store && m_d.m_service) { // filled for this user from a broadcast's copy
          entry = cache::delivered_key(found->identity.key, m_job.uid);
          m = m_store->lookup(entry);
        }
        return m;
      };
      auto meta = look();
      if (!meta && m_store && m_d.m_service) {
        await_fill_for_view(lock, found->identity.key, src.shown);
        meta = look();
      }
      if (meta) {
        hit = proto::ViewEntry{entry, meta->files, meta->bytes, meta->how};
        // Pinned for the job until its end: the view's lower layer is this entry.
        m_d.m_registry.add_cache_key(m_job.job_id, hit.entry);
        m_d.save_registry_locked();
        ++m_d.m_counters.hits;
        (void)m_store->touch(hit.entry, static_cast<std::int64_t>(std::time(nullptr)));
      }
    }
    spdlog::info("job {}: cache view: {}: {}", m_job.job_id, src.path, hit.entry.empty() ? "not a hit" : "hit");
    entries.push_back(hit);
  }
  return entries;
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
  auto user = ipc::credentials_of(job->uid, job->gid);
  if (!user) {
    out.error(user.error());
    return;
  }
  proto::Stage as_stage{r.job_id, r.sources, 0};
  StageRun run(*this, *job, *user, as_stage, out);
  out.result(proto::CacheViewReply{run.find_hits()});
}

} // namespace stagehand::daemon
