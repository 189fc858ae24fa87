// stagehandd's fill thread: a cache miss's spool (service/stage_miss.cpp) becomes a cache entry here,
// after the read, once the node's CPUs have room for it beside the jobs (at most 5 s later); or, once
// another job waits for the source, an archive's or a tree's spool is unpacked as it is written, by a
// child this thread starts then (it follows the spool: the entry is ready about when the leader's own
// copy is); a read into the cache alone (jobs starting together, each waiting for the entry) fills
// as it reads, and its fill is only sealed and published here. A lone miss's fill never competes
// with its job. Entries are published one at a time, as
// the service user, measured and sealed as any fill. A fill that cannot be made (the daemon
// stopping, too many waiting, an error) is dropped: the next job's miss reads the source again.
#include "stagehand/service/fill_thread.hpp"

#include "stagehand/proto/child_messages.hpp"
#include "stagehand/service/child_reply.hpp"
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/cache/stage_plan.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/util/cpu_idle.hpp"
#include "stagehand/util/priority.hpp"
#include "stagehand/util/thread.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace stagehand::service {

namespace {

constexpr std::size_t k_max_waiting_fills = 64; // spools on the cache's disk, each at most its size
constexpr auto k_fill_poll = std::chrono::milliseconds(100); // also how soon a follower starts meanwhile
constexpr std::size_t k_follow_pipe = 1U << 20; // the spool's pages to a following fill, as the tee's to a delivery
constexpr auto k_room_look = std::chrono::milliseconds(100); // how long a look at the CPUs' idle time lasts
constexpr auto k_kill_under_lock = std::chrono::milliseconds(200); // a follower killed under the node's lock

// In a fill child: behind the jobs for CPU and disk (nice 10, the lowest best-effort I/O
// priority), yet never starved on a busy node (best effort).
void behind_the_jobs()
{
  errno = 0;
  if (::nice(10) == -1 && errno != 0) { /* stays at the daemon's priority */ }
  (void)::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, (2 << 13) | 7 /* IOPRIO_CLASS_BE, level 7 */);
}

// The node's CPU time now (/proc/stat, whole: a node with a thousand CPUs lists that many lines).
Result<CpuTimes> read_cpu_times()
{
  auto text = fs::read_file("/proc/stat", 4U << 20);
  if (!text) {
    return text.error();
  }
  return parse_proc_stat(*text);
}

Result<cache::FillResult> fill_reply(const ipc::Message& m) { return proto::parse_child_message<stage::Placed>(m.text); }

} // namespace

void FillThread::queue_locked(SpoolFill task)
{
  std::uint64_t waiting_bytes = task.spool_bytes;
  for (const auto& t : m_spools) {
    waiting_bytes += t.spool_bytes;
  }
  if (m_spools.size() >= k_max_waiting_fills || waiting_bytes > m_node.config.daemon.cache_max_bytes || m_stopping) {
    spdlog::info("job {}: {}: not cached ({})", task.job_id, task.source,
                 m_stopping ? "the daemon is stopping"
                 : m_spools.size() >= k_max_waiting_fills
                   ? "too many cache fills wait already"
                   : "the spools waiting to be filled would hold more than cache_max_bytes");
    ++m_node.counters.fills_dropped;
    end_locked(task, false);
    return;
  }
  task.queued = std::chrono::steady_clock::now();
  m_spools.push_back(std::move(task));
  m_cv.notify_all();
}

void FillThread::end_locked(SpoolFill& task, bool published)
{
  if (task.follow) {
    task.follow->abandoned = true;
    if (task.follow->child) { // killed, if it still runs; one stuck in the kernel is left to the reaper soon
      task.follow->child->kill(k_kill_under_lock); // (the node's lock is held: every request waits meanwhile)
    }
    task.follow->child.reset();
  }
  if (task.fill.dir.valid() || !task.fill.name.empty()) {
    m_node.keeper.remove_later_locked(task.store, task.fill); // by the GC thread
  }
  task.wait->done = true;
  task.wait->published = published;
  task.wait->cv.notify_all();
  m_node.reads.end(task.key, task.wait);
}

void FillThread::start()
{
  // own thread: the daemon's (scripts/thread-starts.sh)
  m_thread = std::thread([this] {
    (void)set_thread_nice(k_job_nice); // its seals and publishes at a job's priority, not the requests'
    loop();
  });
}

void FillThread::stop()
{
  {
    std::lock_guard lock(m_node.mutex);
    m_stopping = true;
    m_cv.notify_all();
  }
  if (m_thread.joinable()) {
    m_thread.join();
  }
}

void FillThread::loop()
{
  std::unique_lock lock(m_node.mutex);
  for (;;) {
    m_cv.wait(lock, [&] { return m_stopping || !m_spools.empty() || !m_follow_starts.empty(); });
    if (m_stopping) {
      for (auto& task : m_spools) {
        end_locked(task, false);
      }
      m_spools.clear();
      m_follow_starts.clear();
      return;
    }
    start_follow_fills_locked(lock);
    if (m_spools.empty()) {
      continue;
    }
    // A fill a job waits for (or a plain file's, which is only a rename) goes first; a lone one
    // waits for room on the CPUs, and back to the front of the queue when such a one comes.
    auto next = std::find_if(m_spools.begin(), m_spools.end(), &FillThread::urgent);
    const bool lone = next == m_spools.end();
    SpoolFill task = std::move(lone ? m_spools.front() : *next);
    m_spools.erase(lone ? m_spools.begin() : next);
    if (lone) {
      const Hold hold = await_room_locked(lock, task);
      if (hold == Hold::stop || m_stopping) { // (told to stop while it read /proc/stat unlocked)
        end_locked(task, false);
        continue;
      }
      if (hold == Hold::yield) {
        m_spools.push_front(std::move(task));
        continue;
      }
    }
    // Its waiters' patience runs from now (a fill held, or queued behind one, starts later than
    // its hand-off).
    task.wait->fill_started = true;
    const auto from_now = cache::entry_patience(std::chrono::steady_clock::now(), task.wait->read_time);
    task.wait->patience_until = std::max(task.wait->patience_until, from_now);
    const std::optional<ipc::Credentials> service = m_node.service;
    lock.unlock();
    Result<cache::FillResult> filled = Error::io("the node cache is off", ENOENT);
    if (task.filled) {
      filled = *task.filled; // made as it was read: only sealed and published here
    } else if (service) {
      filled = fill_from_spool(task, *service);
    }
    Publish outcome = Publish::not_cached;
    if (filled) {
      outcome = publish_spool_fill(task, *filled);
    } else {
      spdlog::warn("job {}: {}: not cached ({})", task.job_id, task.source, filled.error().message);
    }
    lock.lock();
    if (outcome == Publish::not_cached) {
      ++m_node.counters.fills_dropped;
    }
    end_locked(task, outcome == Publish::published);
  }
}

void FillThread::ask_follow_locked(FillWait& w)
{
  if (w.spool_dir && !w.fill_started) {
    // Its fill waits for room on the CPUs, and starts now: the job's patience runs from here.
    w.patience_until = std::max(w.patience_until, cache::entry_patience(std::chrono::steady_clock::now(), w.read_time));
  }
  if (!w.follow_asked) {
    w.follow_asked = true;
    offer_follow_locked(w, w.follow);
    m_cv.notify_all(); // a fill waiting for room starts now
  }
}

bool FillThread::urgent(const SpoolFill& t) { return t.plain || t.filled || t.wait->follow_asked; }

bool FillThread::urgent_queued_locked() const
{
  return std::any_of(m_spools.begin(), m_spools.end(), &FillThread::urgent);
}

FillThread::Hold FillThread::await_room_locked(std::unique_lock<std::mutex>& lock, SpoolFill& task)
{
  using Clock = std::chrono::steady_clock;
  cache::FillRoom room;
  room.held = Clock::now() - task.queued;
  if (cache::lone_fill_start(room) == cache::FillStart::now) {
    task.held = std::chrono::duration<double>(room.held).count();
    return Hold::start; // it waited its turn behind other fills that long already
  }
  lock.unlock();
  auto before = read_cpu_times();
  auto looked = Clock::now();
  lock.lock();
  if (!before) {
    spdlog::warn("job {}: {}: the cache's fill starts without waiting for idle CPUs ({})", task.job_id, task.source,
                 before.error().message);
    return Hold::start;
  }
  for (;;) {
    m_cv.wait_for(lock, k_room_look, [&] {
      return m_stopping || task.wait->follow_asked || !m_follow_starts.empty() || urgent_queued_locked();
    });
    start_follow_fills_locked(lock);
    if (m_stopping) {
      return Hold::stop;
    }
    if (!task.wait->follow_asked && urgent_queued_locked()) {
      return Hold::yield;
    }
    lock.unlock();
    const auto now = read_cpu_times();
    lock.lock();
    // Idle CPUs are judged over a whole look only: a few ticks say nothing.
    const bool whole_look = now && Clock::now() - looked >= k_room_look;
    room.idle_cpus = whole_look ? idle_cpus(*before, *now) : 0.0;
    room.cpus = whole_look ? now->cpus : 0;
    room.held = Clock::now() - task.queued;
    room.job_waits = task.wait->follow_asked;
    if (cache::lone_fill_start(room) == cache::FillStart::now) {
      task.held = std::chrono::duration<double>(room.held).count();
      if (room.held >= cache::k_fill_hold_max && !room.job_waits) {
        spdlog::info("job {}: {}: the node's CPUs stayed busy for {:.1f} s; the cache's fill starts, behind the jobs",
                     task.job_id, task.source, task.held);
      }
      return Hold::start;
    }
    if (whole_look) {
      before = now; // the next look is over the last k_room_look only
      looked = Clock::now();
    }
  }
}

void FillThread::offer_follow_locked(FillWait& w, std::shared_ptr<FollowFill> f)
{
  w.follow = std::move(f);
  if (w.follow && w.follow_asked) {
    m_follow_starts.push_back(w.follow);
    m_cv.notify_all();
  }
}

void FillThread::start_follow_fills_locked(std::unique_lock<std::mutex>& lock)
{
  while (!m_follow_starts.empty()) {
    auto f = std::move(m_follow_starts.front());
    m_follow_starts.pop_front();
    if (f->abandoned || !m_node.service || m_stopping) {
      continue;
    }
    const ipc::Credentials service = *m_node.service;
    lock.unlock();
    auto child = spawn_follower(*f, service);
    lock.lock();
    if (!child) {
      spdlog::info("{}: the cache's fill does not follow the read ({}); it is filled after it", f->source,
                   child.error().message);
    } else if (!f->abandoned) {
      spdlog::info("{}: a job waits for it: the cache's fill follows the read", f->source);
      f->child = std::move(*child);
    } else { // abandoned meanwhile: killed, without the node's lock (a kill waits for its end)
      lock.unlock();
      child->kill();
      lock.lock();
    }
  }
}

Result<ipc::Child> FillThread::spawn_follower(FollowFill& f, const ipc::Credentials& service)
{
  const bool tree = f.tree;
  const std::uint64_t room = f.room;
  const std::string source = f.source;
  auto child = ipc::spawn_as(service, {f.dir.get(), f.verdict->fd()}, [&](int sock, const std::vector<int>& kept) {
    behind_the_jobs(); // beside the job's own copy of the same read
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, nullptr); // the unpacking may stop reading: the feeder's write says so
    auto verdict = ipc::SharedMemory<cache::SpoolVerdict>::attach(kept[1]);
    int p[2];
    if (!verdict || ::pipe2(p, O_CLOEXEC) != 0) {
      (void)ipc::send_message(sock, proto::child_failure(verdict ? Error::from_errno("pipe") : verdict.error()));
      return 1;
    }
    UniqueFd rd(p[0]);
    UniqueFd wr(p[1]);
    (void)::fcntl(wr.get(), F_SETPIPE_SZ, static_cast<int>(k_follow_pipe)); // fewer wake-ups; best effort
    Status fed = ok_status();
    Thread feeder([&] { // its own stack: a thread in a child forked from the daemon's (util/thread.hpp)
      fed = cache::follow_spool(kept[0], wr.get(), *verdict->get());
      wr.reset();
    });
    auto r = tree ? cache::fill_from_stream(rd.get(), kept[0], room, source)
                  : cache::fill_from_archive_stream(rd.get(), kept[0], room, source);
    rd.reset(); // a feeder blocked on the pipe ends
    feeder.join();
    if (!r || (!fed && r->files == 0)) {
      (void)ipc::send_message(sock, proto::child_failure(!r ? r.error() : fed.error()));
      return 1;
    }
    // (an unpacking that ended at the archive's end marker before the spool's padding: complete)
    ::unlinkat(kept[0], cache::k_spool_name, 0); // the fill's room back before it is measured
    (void)ipc::send_message(sock, proto::child_message(*r));
    return 0;
  });
  if (child) {
    f.verdict->handed_out();
  }
  return child;
}

Result<cache::FillResult> FillThread::await_fill_child(ipc::Child& child)
{
  for (;;) {
    auto m = ipc::receive_message(child.sock(), k_fill_poll);
    if (m) {
      // Its word counts once it has ended with all it started: nothing of it may write on into
      // the fill that is sealed next.
      if (auto ended = child.wait(); !ended) {
        return ended.error();
      }
      return fill_reply(*m);
    }
    std::unique_lock lock(m_node.mutex);
    if (m.error().code != ETIMEDOUT || m_stopping) {
      lock.unlock();
      child.kill();
      return m_stopping ? Error::io("the daemon is stopping", EINTR) : child.why_closed(m.error());
    }
    start_follow_fills_locked(lock);
  }
}

Result<cache::FillResult> FillThread::fill_from_spool(SpoolFill& task, const ipc::Credentials& service)
{
  if (task.plain) {
    return cache::fill_from_plain_spool(task.fill.dir.get(), cache::k_spool_name, task.mode);
  }
  std::optional<ipc::Child> follower;
  if (task.follow) {
    std::lock_guard lock(m_node.mutex);
    follower = std::move(task.follow->child);
    task.follow->child.reset();
  }
  if (follower) {
    auto followed = await_fill_child(*follower);
    // (EBUSY: something it started did not end; its fill directory is not used again.)
    if (followed || m_stopping || followed.error().code == EBUSY) {
      return followed;
    }
    // What it left is removed with a fill made again from the spool (still there: a follower
    // removes it only when it succeeds).
    spdlog::info("job {}: {}: the fill that followed the read failed ({}); filling from the spool", task.job_id,
                 task.source, followed.error().message);
    if (auto st = fs::remove_tree(task.fill.dir.get(), cache::k_data_name); !st && st.error().code != ENOENT) {
      return st.error();
    }
  }
  UniqueFd spool(::openat(task.fill.dir.get(), cache::k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!spool.valid()) {
    return Error::from_errno("the spool");
  }
  auto child = ipc::spawn_as(service, {spool.get(), task.fill.dir.get()}, [&](int sock, const std::vector<int>& kept) {
    behind_the_jobs(); // off every job's path
    auto r = task.tree ? cache::fill_from_stream(kept[0], kept[1], task.room, task.source)
                       : cache::fill_from_file(kept[0], kept[1], task.unpack, task.room, task.source);
    ::unlinkat(kept[1], cache::k_spool_name, 0); // the fill's room back before it is measured
    return reply_to_parent(sock, r);
  });
  if (!child) {
    return child.error();
  }
  spool.reset();
  return await_fill_child(*child);
}

FillThread::Publish FillThread::publish_spool_fill(SpoolFill& task, const cache::FillResult& fr)
{
  const auto t0 = std::chrono::steady_clock::now();
  cache::EntryMeta meta;
  meta.key = task.key;
  meta.source = task.source;
  meta.kind = task.tree ? stage::SourceKind::dir : stage::SourceKind::file;
  meta.how = fr.how;
  meta.files = fr.files;
  meta.bytes = fr.bytes;
  // Until it is published the fill is ours alone: sealed (and measured) without the daemon's lock.
  auto sealed = task.store->seal(task.fill, meta);
  if (!sealed) {
    spdlog::warn("job {}: {}: not cached ({})", task.job_id, task.source, sealed.error().message);
    return Publish::not_cached;
  }
  std::unique_lock lock(m_node.mutex);
  if (sealed->disk_bytes > m_node.config.daemon.cache_max_bytes) {
    spdlog::info("job {}: {}: not cached (larger than the node cache)", task.job_id, task.source);
    return Publish::not_cached;
  }
  // Not when a reload moved the cache meanwhile: this entry goes to the old one.
  if (!m_node.keeper.make_room_locked(task.store, sealed->disk_bytes)) {
    spdlog::info("job {}: {}: not cached (the node cache is full of entries running jobs use)", task.job_id,
                 task.source);
    return Publish::not_cached;
  }
  auto published = m_node.keeper.publish(*task.store, task.fill, *sealed);
  if (!published) {
    if (published.error().code != EEXIST && published.error().code != ENOTEMPTY) {
      spdlog::warn("job {}: {}: not cached ({})", task.job_id, task.source, published.error().message);
    }
    return published.error().code == EEXIST || published.error().code == ENOTEMPTY
             ? Publish::lost_race // another fill of the same key won; this one goes
             : Publish::not_cached;
  }
  task.fill.name.clear();
  task.fill.dir.reset();
  lock.unlock(); // the rename made durable without the node's lock (a directory fsync may wait on the disk)
  task.store->sync_published();
  spdlog::info("job {}: cached {} ({} files, {} bytes on disk; {}, published in {:.2f} s)", task.job_id, task.source,
               fr.files, published->disk_bytes,
               task.filled ? std::string("filled as it was read")
                           : fmt::format("filled from the spool after waiting {:.2f} s for idle CPUs", task.held),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return Publish::published;
}

} // namespace stagehand::service
