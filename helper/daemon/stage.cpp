// The stage request: for each source, the job user's side opens and identifies it; a hit is linked
// into the job's directory; a miss is filled once (single flight) by the service user's side, then
// published and linked. Any failure removes what this request made.
#include "daemon.hpp"

#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/stage/entry_path.hpp"
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

namespace {

constexpr auto k_keepalive = std::chrono::seconds(5);
constexpr auto k_stalled_fill = std::chrono::seconds(600); // a leader fill silent this long is given up on

// Messages from the children: {"ok":true,...} or {"ok":false,"kind":...,"error":...}.
std::string child_error(const Error& e)
{
  return json{{"ok", false}, {"kind", kind_name(e.kind)}, {"code", e.code}, {"error", e.message}}.dump(
    -1, ' ', false, json::error_handler_t::replace);
}

Result<json> child_reply(const ipc::Message& m)
{
  json j = json::parse(m.text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::internal("a staging child sent garbage");
  }
  if (!j.value("ok", false)) {
    Error e = Error::internal(j.value("error", std::string("a staging child failed")));
    e.kind = kind_from_name(j.value("kind", std::string("internal"))).value_or(ErrorKind::internal);
    e.code = j.value("code", 0);
    return e;
  }
  return j;
}

cache::SourceShape shape_of(const proto::SourceSpec& s)
{
  return s.kind == proto::SourceKind::dir ? cache::SourceShape::dir : cache::SourceShape::file;
}

cache::UnpackMode unpack_of(const proto::SourceSpec& s)
{
  return s.unpack == proto::Unpack::never ? cache::UnpackMode::never : cache::UnpackMode::if_archive;
}

} // namespace

class StageRun
{
public:
  StageRun(Daemon& d, const registry::JobRecord& job, ipc::Credentials user, const proto::Stage& request,
           Responder& out)
    : m_d(d), m_job(job), m_user(std::move(user)), m_request(request), m_out(out)
  {
  }

  void execute()
  {
    {
      std::lock_guard lock(m_d.m_mutex);
      m_store = m_d.m_store; // ours for the whole request, even if a reload replaces it
      m_max_bytes = std::min(m_request.max_bytes, m_d.m_config.stage.max_bytes); // never above the site's
    }
    auto job_fd = open_job_dir();
    if (!job_fd) {
      m_out.error(job_fd.error());
      return;
    }
    m_job_fd = std::move(*job_fd);
    {
      std::lock_guard lock(m_d.m_mutex);
      m_staging_id = m_d.m_next_staging++;
    }
    proto::StageReply reply;
    for (const auto& src : m_request.sources) {
      auto staged = stage_one(src);
      if (!staged) {
        rollback();
        finish_staging();
        m_out.error(staged.error().with_context("--stage-data"));
        return;
      }
      reply.staged.push_back(*staged);
    }
    finish_staging();
    m_out.result(reply);
  }

private:
  Result<UniqueFd> open_job_dir()
  {
    auto base = m_d.open_base();
    if (!base) {
      return base.error();
    }
    // Not into a mount the job made on its directory: a hung FUSE server would hold this thread.
    auto opened = fs::open_beneath(base->get(), tmpdir::job_dir_name(m_job.job_id), O_RDONLY | O_DIRECTORY);
    UniqueFd fd = opened ? std::move(*opened) : UniqueFd();
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
      return Error::refused("job " + std::to_string(m_job.job_id) + " has no directory on node " + m_d.m_node);
    }
    if (st.st_uid != m_job.uid) {
      return Error::refused("the directory of job " + std::to_string(m_job.job_id) + " is not the job user's");
    }
    return fd;
  }

  void finish_staging()
  {
    std::lock_guard lock(m_d.m_mutex);
    m_d.m_stagings.erase(m_staging_id);
  }

  void progress(const proto::Progress& p)
  {
    {
      std::lock_guard lock(m_d.m_mutex);
      m_d.m_stagings[m_staging_id] = Daemon::Staging{m_job.uid, p};
      if (m_fill_wait) {
        if (p.done_bytes != m_fill_wait->progress) {
          m_fill_wait->progressed = std::chrono::steady_clock::now();
        }
        m_fill_wait->progress = p.done_bytes;
      }
    }
    m_out.progress(p);
  }

  // Waits for a child's message, sending a progress frame every few seconds meanwhile. On any
  // failure the child is killed (the job user may have stopped it: it runs with their uid).
  Result<ipc::Message> await(ipc::Child& child, const std::function<proto::Progress()>& status)
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
        return give_up(m.error());
      }
      if (stopped(child.pid())) {
        return give_up(Error::io("the staging process was stopped (SIGSTOP)", EINTR));
      }
      progress(status());
      if (m_out.broken()) {
        return give_up(Error::io("the client went away", EPIPE)); // the job gave up: stop working for it
      }
    }
  }

  // Whether a child is stopped (state T or t in /proc/PID/stat).
  static bool stopped(pid_t pid)
  {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
    char buf[512] = {};
    ssize_t n = fd.valid() ? ::read(fd.get(), buf, sizeof buf - 1) : -1;
    if (n <= 0) {
      return false;
    }
    const char* close = std::strrchr(buf, ')'); // the command name may hold anything
    return close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
  }

  Result<proto::StagedSource> stage_one(const proto::SourceSpec& src)
  {
    const auto t0 = Clock::now();
    auto parts = stage::split_entry_path(src.dest);
    if (!parts || parts->empty() || std::string_view((*parts)[0]).starts_with(".stagehand")) {
      return Error::refused(src.shown + ": destination \"" + src.dest + "\" is not allowed");
    }
    const std::uint64_t room = m_max_bytes > m_total ? m_max_bytes - m_total : 0;
    auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

    // 1. As the job user: open the source and say what it is.
    std::vector<std::string> roots;
    {
      std::lock_guard lock(m_d.m_mutex);
      roots = m_d.m_config.stage.allowed_roots;
    }
    auto ident_child = ipc::spawn_as(m_user, {}, [&](int sock, const std::vector<int>&) {
      auto fd = cache::open_source(src.path, src.shown, shape_of(src), roots);
      if (!fd) {
        (void)ipc::send_message(sock, child_error(fd.error()));
        return 1;
      }
      auto id = shape_of(src) == cache::SourceShape::dir ? cache::identify_tree(fd->get(), src.path, src.shown)
                                                         : cache::identify_file(fd->get(), src.path, unpack_of(src));
      if (!id) {
        (void)ipc::send_message(sock, child_error(id.error()));
        return 1;
      }
      (void)ipc::send_message(sock, json{{"ok", true}, {"key", id->key}, {"files", id->files}, {"bytes", id->bytes}}.dump(),
                              {fd->get()});
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
    auto ident = child_reply(*ident_msg);
    if (!ident) {
      return ident.error();
    }
    if (ident_msg->fds.size() != 1) {
      return Error::internal("the user side sent no descriptor");
    }
    UniqueFd src_fd = std::move(ident_msg->fds[0]);
    std::string key = (*ident)["key"].get<std::string>();
    if (src.kind == proto::SourceKind::file) {
      // A file's key needs only fstat: taken here from the descriptor, not from the user's side.
      auto mine = cache::identify_file(src_fd.get(), src.path, unpack_of(src));
      if (!mine) {
        return mine.error();
      }
      key = mine->key;
    }
    const std::uint64_t src_bytes = (*ident)["bytes"].get<std::uint64_t>();
    if (src.kind == proto::SourceKind::dir && src_bytes > room) {
      return Error::limit(src.shown + ": " + std::to_string(src_bytes) + " bytes, more than the " +
                          std::to_string(room) + " left under [stage] max_bytes (limit)");
    }

    // 2. A hit, a wait for someone else's fill, or our own fill.
    proto::StagedSource out{src.shown, src.dest, "copied", 0, 0, 0, proto::CacheOutcome::hit, ""};
    std::optional<cache::Fill> uncached; // a fill used for this job only
    for (int attempt = 0;; ++attempt) {
      std::unique_lock lock(m_d.m_mutex);
      if (!m_store || !m_d.m_service) {
        return Error::io("the node cache is off", ENOENT);
      }
      if (auto meta = m_store->lookup(key)) {
        ++m_d.m_pins[key];
        m_pinned.push_back(key);
        out.how = meta->how;
        if (meta->bytes > room) {
          return Error::limit(src.shown + ": unpacks to " + std::to_string(meta->bytes) + " bytes, more than the " +
                              std::to_string(room) + " left under [stage] max_bytes (limit)");
        }
        break;
      }
      if (auto it = m_d.m_fills.find(key); it != m_d.m_fills.end() && attempt < 3) {
        auto wait = it->second;
        while (!wait->done) {
          if (wait->measured && std::chrono::steady_clock::now() - wait->progressed > k_stalled_fill) {
            return Error::io("another job's fill of this source has made no progress for " +
                               std::to_string(k_stalled_fill.count()) + " s",
                             ETIMEDOUT);
          }
          if (!wait->cv.wait_for(lock, k_keepalive, [&] { return wait->done; })) {
            const auto done = wait->progress;
            lock.unlock();
            progress(proto::Progress{src.shown, done, src_bytes, seconds()}); // waiting for another job's fill
            lock.lock();
            if (m_out.broken()) {
              return Error::io("the client went away", EPIPE);
            }
          }
        }
        continue; // published: a hit; failed: try ourselves
      }
      // Ours to fill.
      auto wait = std::make_shared<FillWait>();
      wait->progressed = std::chrono::steady_clock::now();
      wait->measured = src.kind == proto::SourceKind::file;
      m_d.m_fills[key] = wait;
      m_fill_wait = wait;
      const ipc::Credentials service = *m_d.m_service;
      const std::uint64_t cache_max = m_d.m_config.daemon.cache_max_bytes;
      lock.unlock();
      auto filled = fill(src, src_fd.get(), key, service, room, src_bytes, seconds);
      lock.lock();
      m_fill_wait.reset();
      wait->done = true;
      wait->published = filled && !filled->second;
      wait->cv.notify_all();
      m_d.m_fills.erase(key);
      if (!filled) {
        return filled.error();
      }
      out.cache = proto::CacheOutcome::miss;
      out.how = filled->first.how;
      if (filled->second) {
        uncached = std::move(filled->second);
        out.cache = proto::CacheOutcome::none;
        break;
      }
      (void)cache_max;
      break; // published and pinned by fill()
    }

    // 3. Into the job's directory.
    Result<cache::Materialised> placed = Error::internal("not placed");
    if (uncached) {
      placed = cache::materialise(uncached->dir.get(), cache::k_data_name, m_job_fd.get(), src.dest,
                                  cache::JobUser{m_job.uid, m_job.gid});
      std::lock_guard lock(m_d.m_mutex);
      m_d.m_fill_dirs.erase(uncached->name);
      m_store->discard(*uncached);
    } else {
      auto entry = m_store->open_entry(key);
      if (!entry) {
        return entry.error();
      }
      placed = cache::materialise(entry->get(), cache::k_data_name, m_job_fd.get(), src.dest,
                                  cache::JobUser{m_job.uid, m_job.gid});
    }
    if (!placed) {
      return placed.error().with_context(src.shown);
    }
    m_made.push_back(placed->created_top);
    m_total += placed->bytes;
    out.files = placed->files;
    out.bytes = placed->bytes;
    out.seconds = seconds();
    std::lock_guard lock(m_d.m_mutex);
    if (out.cache == proto::CacheOutcome::hit) {
      ++m_d.m_counters.hits;
      (void)m_store->touch(key, static_cast<std::int64_t>(std::time(nullptr)));
    } else if (out.cache == proto::CacheOutcome::miss) {
      ++m_d.m_counters.misses;
    }
    m_d.m_counters.staged_bytes += out.bytes;
    m_d.m_counters.staged_seconds += out.seconds;
    if (out.cache != proto::CacheOutcome::none) {
      m_d.m_registry.add_cache_key(m_job.job_id, key);
      m_d.save_registry_locked();
    }
    return out;
  }

  // Fills the cache for `key`. Returns the fill result and, when the entry must not be published
  // (larger than the cache, or the source changed while it was read), the fill to use uncached.
  Result<std::pair<cache::FillResult, std::optional<cache::Fill>>>
  fill(const proto::SourceSpec& src, int src_fd, const std::string& key, const ipc::Credentials& service,
       std::uint64_t room, std::uint64_t src_bytes, const std::function<double()>& seconds)
  {
    Result<cache::Fill> begun = Error::internal("no fill");
    {
      std::lock_guard lock(m_d.m_mutex);
      begun = m_store->begin_fill(key, service.uid, service.gid);
      if (begun) {
        m_d.m_fill_dirs.insert(begun->name);
      }
    }
    if (!begun) {
      return begun.error();
    }
    cache::Fill f = std::move(*begun);
    auto drop = [&](Error e) -> Error {
      std::lock_guard lock(m_d.m_mutex);
      m_d.m_fill_dirs.erase(f.name);
      m_store->discard(f);
      return e;
    };
    const int fill_fd = f.dir.get();
    const std::string shown = src.shown;
    const auto unpack = unpack_of(src);
    bool source_changed = false;
    Result<json> result = Error::internal("no result");
    if (src.kind == proto::SourceKind::file) {
      auto svc = ipc::spawn_as(service, {src_fd, fill_fd}, [&](int sock, const std::vector<int>& kept) {
        auto r = cache::fill_from_file(kept[0], kept[1], unpack, room, shown);
        if (!r) {
          (void)ipc::send_message(sock, child_error(r.error()));
          return 1;
        }
        (void)ipc::send_message(sock, json{{"ok", true}, {"how", r->how}, {"files", r->files}, {"bytes", r->bytes}}.dump());
        return 0;
      });
      if (!svc) {
        return drop(svc.error());
      }
      auto msg = await(*svc, [&] {
        off_t at = ::lseek(src_fd, 0, SEEK_CUR); // the service side reads through the same open file
        return proto::Progress{shown, at > 0 ? static_cast<std::uint64_t>(at) : 0, src_bytes, seconds()};
      });
      if (msg) {
        (void)svc->wait();
      }
      if (!msg) {
        return drop(msg.error());
      }
      result = child_reply(*msg);
      auto again = cache::identify_file(src_fd, src.path, unpack);
      source_changed = !again || again->key != key;
    } else {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) {
        return drop(Error::from_errno("pipe"));
      }
      UniqueFd rd(p[0]);
      UniqueFd wr(p[1]);
      const std::string path = src.path;
      auto reader = ipc::spawn_as(m_user, {src_fd, wr.get()}, [&](int sock, const std::vector<int>& kept) {
        auto r = cache::stream_tree(kept[0], kept[1], path, shown);
        ::close(kept[1]);
        if (!r) {
          (void)ipc::send_message(sock, child_error(r.error()));
          return 1;
        }
        (void)ipc::send_message(sock, json{{"ok", true}, {"key", r->identity.key}, {"changed", r->changed}}.dump());
        return 0;
      });
      if (!reader) {
        return drop(reader.error());
      }
      auto svc = ipc::spawn_as(service, {rd.get(), fill_fd}, [&](int sock, const std::vector<int>& kept) {
        auto r = cache::fill_from_stream(kept[0], kept[1], room, shown);
        if (!r) {
          (void)ipc::send_message(sock, child_error(r.error()));
          return 1;
        }
        (void)ipc::send_message(sock, json{{"ok", true}, {"how", r->how}, {"files", r->files}, {"bytes", r->bytes}}.dump());
        return 0;
      });
      rd.reset();
      wr.reset();
      if (!svc) {
        return drop(svc.error());
      }
      auto msg = await(*svc, [&] { return proto::Progress{shown, 0, src_bytes, seconds()}; });
      if (!msg) {
        reader->kill(); // the other side of the pipe goes too
      }
      auto read_msg = await(*reader, [&] { return proto::Progress{shown, 0, src_bytes, seconds()}; });
      if (msg) {
        (void)svc->wait();
      }
      if (read_msg) {
        (void)reader->wait();
      }
      if (!read_msg) {
        return drop(read_msg.error());
      }
      auto read = child_reply(*read_msg);
      if (!read) {
        return drop(read.error()); // the user side's reason (e.g. permission denied) comes first
      }
      if (!msg) {
        return drop(msg.error());
      }
      result = child_reply(*msg);
      source_changed = (*read)["key"].get<std::string>() != key || (*read)["changed"].get<bool>();
    }
    if (!result) {
      return drop(result.error());
    }
    cache::FillResult fr{(*result)["how"].get<std::string>(), (*result)["files"].get<std::uint64_t>(),
                         (*result)["bytes"].get<std::uint64_t>()};
    std::lock_guard lock(m_d.m_mutex);
    const std::uint64_t fill_bytes = cache::disk_usage(f.dir.get(), cache::k_data_name);
    if (source_changed || fill_bytes > m_d.m_config.daemon.cache_max_bytes) {
      spdlog::info("job {}: {}: staged without caching ({})", m_job.job_id, src.path,
                   source_changed ? "the source changed while it was read" : "larger than the node cache");
      return std::pair{fr, std::optional<cache::Fill>(std::move(f))};
    }
    m_d.evict_to_fit_locked(m_d.m_config.daemon.cache_max_bytes > fill_bytes
                              ? m_d.m_config.daemon.cache_max_bytes - fill_bytes
                              : 0);
    cache::EntryMeta meta;
    meta.key = key;
    meta.source = src.path;
    meta.shape = src.kind == proto::SourceKind::dir ? "dir" : "file";
    meta.how = fr.how;
    meta.files = fr.files;
    meta.bytes = fr.bytes;
    auto published = m_store->publish(f, meta);
    m_d.m_fill_dirs.erase(f.name);
    if (!published) {
      if (published.error().code == EEXIST || published.error().code == ENOTEMPTY) {
        m_store->discard(f); // another fill of the same key won: use that one
        ++m_d.m_pins[key];
        m_pinned.push_back(key);
        return std::pair{fr, std::optional<cache::Fill>()};
      }
      m_d.m_fill_dirs.insert(f.name);
      return std::pair{fr, std::optional<cache::Fill>(std::move(f))};
    }
    ++m_d.m_pins[key]; // ours until it is linked into the job
    m_pinned.push_back(key);
    spdlog::info("job {}: cached {} ({} files, {} bytes on disk)", m_job.job_id, src.path, fr.files,
                 published->disk_bytes);
    return std::pair{fr, std::optional<cache::Fill>()};
  }

  void rollback()
  {
    for (auto it = m_made.rbegin(); it != m_made.rend(); ++it) {
      const std::string& rel = *it;
      const auto slash = rel.rfind('/');
      const std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
      const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
      if (auto fd = fs::open_beneath(m_job_fd.get(), parent, O_RDONLY | O_DIRECTORY)) {
        (void)fs::remove_tree(fd->get(), name);
      }
    }
    m_made.clear();
  }

public:
  ~StageRun()
  {
    std::lock_guard lock(m_d.m_mutex);
    for (const auto& key : m_pinned) {
      if (--m_d.m_pins[key] <= 0) {
        m_d.m_pins.erase(key);
      }
    }
  }

private:
  Daemon& m_d;
  registry::JobRecord m_job;
  ipc::Credentials m_user;
  const proto::Stage& m_request;
  Responder& m_out;
  UniqueFd m_job_fd;
  std::shared_ptr<cache::Store> m_store;
  std::uint64_t m_max_bytes = 0;          // the job's limit, never above [stage] max_bytes
  std::shared_ptr<FillWait> m_fill_wait;  // our fill, when we lead one: waiters see its progress
  std::vector<std::string> m_made; // created below the job directory, for rollback
  std::vector<std::string> m_pinned;
  std::uint64_t m_total = 0;
  std::uint64_t m_staging_id = 0;
};

void Daemon::on_stage(const proto::Stage& r, const Peer& peer, Responder& out)
{
  auto job = job_for(r.job_id, peer);
  if (!job) {
    out.error(job.error());
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
    user = ipc::Credentials{peer.uid, peer.gid, peer.groups, "uid " + std::to_string(peer.uid)};
  }
  StageRun run(*this, *job, user, r, out);
  run.execute();
}

} // namespace stagehand::daemon
