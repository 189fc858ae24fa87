// stagehandd's stage request, per source: the job user's side opens and identifies it (a child with
// their credentials), a hit is linked into the job's directory, a miss is filled once (single
// flight) by the service user's side, then published and linked.
#include "stage_run.hpp"

#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/shared_memory.hpp"
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

Result<proto::StagedSource> StageRun::stage_one(const proto::SourceSpec& src)
{
  const auto t0 = Clock::now();
  // Read before anything of the source is: its entries must be older than this by the racy window
  // for the fill to be published (cache::changed_near).
  struct timespec started {};
  ::clock_gettime(CLOCK_REALTIME, &started);
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
    (void)ipc::send_message(sock,
                            json{{"ok", true}, {"key", id->key}, {"files", id->files}, {"bytes", id->bytes},
                                 {"newest_ns", id->newest_ns}}
                              .dump(),
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
  const double identified = seconds();
  cache::SourceIdentity identity{(*ident)["key"].get<std::string>(), (*ident)["files"].get<std::uint64_t>(),
                                 (*ident)["bytes"].get<std::uint64_t>(), (*ident)["newest_ns"].get<std::int64_t>()};
  if (src.kind == proto::SourceKind::file) {
    // A file's key needs only fstat: taken here from the descriptor, not from the user's side.
    auto mine = cache::identify_file(src_fd.get(), src.path, unpack_of(src));
    if (!mine) {
      return mine.error();
    }
    identity = *mine;
  }
  const std::string& key = identity.key;
  const std::uint64_t src_bytes = identity.bytes;
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
        if (std::chrono::steady_clock::now() - wait->progressed > k_stalled_fill) {
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
    m_d.m_fills[key] = wait;
    m_fill_wait = wait;
    const ipc::Credentials service = *m_d.m_service;
    lock.unlock();
    auto filled = fill(src, src_fd.get(), identity, started, service, room, seconds);
    lock.lock();
    m_fill_wait.reset();
    wait->done = true;
    wait->published = filled && !filled->uncached;
    wait->cv.notify_all();
    m_d.m_fills.erase(key);
    if (!filled) {
      return filled.error();
    }
    out.cache = proto::CacheOutcome::miss;
    out.how = filled->result.how;
    if (filled->uncached) {
      uncached = std::move(filled->uncached);
      out.cache = proto::CacheOutcome::none;
      out.note = filled->why_uncached;
      break;
    }
    break; // published and pinned by fill()
  }

  // 3. Into the job's directory.
  const double obtained = seconds();
  Result<cache::Materialised> placed = Error::internal("not placed");
  if (uncached) {
    placed = cache::materialise(uncached->dir.get(), cache::k_data_name, m_job_fd.get(), src.dest,
                                cache::JobUser{m_job.uid, m_job.gid});
    std::lock_guard lock(m_d.m_mutex);
    m_d.remove_later_locked(m_store, *uncached); // by the GC thread
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
  spdlog::info("job {}: {} ({}): {:.2f} s: identified in {:.2f} s, {} in {:.2f} s, linked in {:.2f} s", m_job.job_id,
               src.path, proto::outcome_name(out.cache), out.seconds, identified,
               out.cache == proto::CacheOutcome::hit ? "found" : "filled", obtained - identified, out.seconds - obtained);
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

Result<StageRun::Filled> StageRun::fill(const proto::SourceSpec& src, int src_fd, const cache::SourceIdentity& ident,
                                        const struct timespec& started, const ipc::Credentials& service,
                                        std::uint64_t room, const std::function<double()>& seconds)
{
  const std::string& key = ident.key;
  const std::uint64_t src_bytes = ident.bytes;
  std::int64_t newest_ns = ident.newest_ns;
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
    m_d.remove_later_locked(m_store, f); // by the GC thread
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
    // Whatever the service side forked ends with it: nothing of its uid may still write into the
    // fill once it is measured and published.
    svc->kill();
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
      (void)ipc::send_message(sock, json{{"ok", true},
                                         {"key", r->identity.key},
                                         {"changed", r->changed},
                                         {"newest_ns", r->identity.newest_ns}}
                                      .dump());
      return 0;
    });
    if (!reader) {
      return drop(reader.error());
    }
    // What the service side has unpacked: a directory's fill reads a pipe, which has no offset to
    // look at. Its bytes are the progress the job and `stagehand status` see; bytes or entries
    // moving keep jobs waiting for this fill from giving up on it. Made after the user's reader
    // is forked and handed to the service side alone: the job's user cannot write these numbers.
    auto counters = ipc::SharedMemory<stage::WorkCounters>::make();
    if (!counters) {
      reader->kill();
      return drop(counters.error());
    }
    stage::WorkCounters* const done = counters->get();
    auto svc = ipc::spawn_as(service, {rd.get(), fill_fd, counters->fd()}, [&](int sock, const std::vector<int>& kept) {
      auto shared = ipc::SharedMemory<stage::WorkCounters>::attach(kept[2]);
      if (!shared) {
        (void)ipc::send_message(sock, child_error(shared.error()));
        return 1;
      }
      auto r = cache::fill_from_stream(kept[0], kept[1], room, shown, shared->get());
      if (!r) {
        (void)ipc::send_message(sock, child_error(r.error()));
        return 1;
      }
      (void)ipc::send_message(sock, json{{"ok", true}, {"how", r->how}, {"files", r->files}, {"bytes", r->bytes}}.dump());
      return 0;
    });
    rd.reset();
    wr.reset();
    counters->handed_out();
    if (!svc) {
      return drop(svc.error());
    }
    std::uint64_t entries_seen = 0;
    auto status = [&] {
      if (const auto entries = done->entries.load(std::memory_order_relaxed); entries != entries_seen) {
        entries_seen = entries; // empty files move no bytes, yet the fill is alive
        fill_alive();
      }
      return proto::Progress{shown, done->bytes.load(std::memory_order_relaxed), src_bytes, seconds()};
    };
    auto msg = await(*svc, status);
    if (!msg) {
      reader->kill(); // the other side of the pipe goes too
    }
    auto read_msg = await(*reader, status);
    // Both sides end here with whatever they forked (each leads its own process group).
    svc->kill();
    reader->kill();
    if (!read_msg) {
      return drop(read_msg.error());
    }
    auto read = child_reply(*read_msg);
    if (msg) {
      result = child_reply(*msg);
    }
    if (!read) {
      // The user side's reason (e.g. permission denied) comes first, unless it only saw the fill
      // side go away: then the fill side's own reason is the one to say (out of room, a limit).
      if (read.error().code == EPIPE && msg && !result) {
        return drop(result.error());
      }
      return drop(read.error());
    }
    if (!msg) {
      return drop(msg.error());
    }
    source_changed = (*read)["key"].get<std::string>() != key || (*read)["changed"].get<bool>();
    newest_ns = std::max(newest_ns, (*read)["newest_ns"].get<std::int64_t>());
  }
  if (!result) {
    return drop(result.error());
  }
  cache::FillResult fr{(*result)["how"].get<std::string>(), (*result)["files"].get<std::uint64_t>(),
                       (*result)["bytes"].get<std::uint64_t>()};
  const double unpacked = seconds();
  // Until it is published the fill is this staging's alone: measured, described and synced without
  // the daemon's lock (a walk of every file, a sync that waits for the disk). Jobs waiting for it
  // see it alive before each of the two.
  fill_alive();
  const std::uint64_t fill_bytes = cache::disk_usage(f.dir.get(), cache::k_data_name);
  fill_alive();
  std::uint64_t max_bytes = 0;
  {
    std::lock_guard lock(m_d.m_mutex);
    max_bytes = m_d.m_config.daemon.cache_max_bytes;
  }
  if (std::string why = cache::publish_refusal(cache::PublishCheck{!source_changed, newest_ns, started, fill_bytes, max_bytes});
      !why.empty()) {
    spdlog::info("job {}: {}: staged without caching ({})", m_job.job_id, src.path, why);
    return Filled{fr, std::move(f), why};
  }
  cache::EntryMeta meta;
  meta.key = key;
  meta.source = src.path;
  meta.shape = src.kind == proto::SourceKind::dir ? "dir" : "file";
  meta.how = fr.how;
  meta.files = fr.files;
  meta.bytes = fr.bytes;
  meta.disk_bytes = fill_bytes; // measured above: one walk of the fill, not two
  auto sealed = m_store->seal(f, meta);
  if (!sealed) {
    spdlog::warn("job {}: {}: staged without caching ({})", m_job.job_id, src.path, sealed.error().message);
    return Filled{fr, std::move(f), "the node cache could not store it"};
  }
  std::lock_guard lock(m_d.m_mutex);
  // Not when a reload moved the cache meanwhile: this entry goes to the old one.
  if (m_store == m_d.m_store && !m_d.make_room_locked(m_store, sealed->disk_bytes)) {
    std::string why = "not cached: the node cache is full of entries running jobs use";
    spdlog::info("job {}: {}: staged without caching ({})", m_job.job_id, src.path, why);
    return Filled{fr, std::move(f), why};
  }
  m_d.m_fill_dirs.erase(f.name); // published, the name is gone from tmp/
  auto published = m_store->publish_sealed(f, *sealed);
  if (!published) {
    if (published.error().code == EEXIST || published.error().code == ENOTEMPTY) {
      // Another fill of the same key won: use that one; this one goes (by the GC thread).
      m_d.remove_later_locked(m_store, f);
      ++m_d.m_pins[key];
      m_pinned.push_back(key);
      return Filled{fr, std::nullopt, ""};
    }
    m_d.m_fill_dirs.insert(f.name);
    return Filled{fr, std::move(f), "the node cache could not store it"};
  }
  ++m_d.m_pins[key]; // ours until it is linked into the job
  m_pinned.push_back(key);
  spdlog::info("job {}: cached {} ({} files, {} bytes on disk; measured and published in {:.2f} s)", m_job.job_id,
               src.path, fr.files, published->disk_bytes, seconds() - unpacked);
  return Filled{fr, std::nullopt, ""};
}

} // namespace stagehand::daemon
