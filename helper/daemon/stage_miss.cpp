// stagehandd's cache miss: the source is read once, by the service user's side, and every byte
// goes at once to the job (unpacked or copied into its directory by a child with the job user's
// credentials, as staging without the daemon would) and to a spool in the cache's fill directory.
// The job's reply does not wait for the cache: the spool is unpacked into an entry by a fill the
// fill thread runs after the read, or beside it (following the spool as it grows) once another
// job waits for this source, at a lower priority (spool_fill.cpp). Jobs asking for the same source meanwhile wait for
// that entry or deliver from the spool: no second read of the shared filesystem.
#include "stage_run.hpp"

#include "stagehand/proto/child_messages.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/ipc/shared_memory.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagehand::daemon {

using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds k_spool_stall{200};

} // namespace

Result<ipc::Child> StageRun::spawn_delivery(int in_fd, const Delivery& d)
{
  const stage::DeliverTo to{m_job_fd.get(), d.src->dest, d.room, nullptr};
  const std::string shown = d.src->shown;
  return ipc::spawn_as(m_user, {in_fd, m_job_fd.get()}, [&, to](int sock, const std::vector<int>& kept) {
    stage::DeliverTo mine = to;
    mine.tmpdir_fd = kept[1];
    auto r = stage::deliver(kept[0], d.content, d.file_stat, mine, shown);
    if (!r) {
      (void)ipc::send_message(sock, proto::child_failure(r.error()));
      return 1;
    }
    (void)ipc::send_message(sock, proto::child_message(*r));
    return 0;
  });
}

Result<stage::Delivered> StageRun::delivered_by(const ipc::Message& m) const
{
  return proto::parse_child_message<stage::Placed>(m.text);
}

Result<stage::Delivered> StageRun::deliver_from(int in_fd, const Delivery& d, const std::function<double()>& seconds)
{
  auto child = spawn_delivery(in_fd, d);
  if (!child) {
    return child.error();
  }
  struct stat st {};
  const std::uint64_t total = ::fstat(in_fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  auto msg = await(*child, [&] {
    off_t at = ::lseek(in_fd, 0, SEEK_CUR); // the child reads through the same open file
    return proto::Progress{d.src->shown, at > 0 ? static_cast<std::uint64_t>(at) : 0, total, seconds()};
  });
  if (!msg) {
    return msg.error();
  }
  (void)child->wait();
  return delivered_by(*msg);
}

Result<StageRun::Missed> StageRun::miss(const Delivery& d, int src_fd, const MissContext& c)
{
  const proto::SourceSpec& src = *d.src;
  Missed out;
  // The spool: only for what may be cached (read long enough after its last change, and not larger
  // than the whole cache).
  std::optional<cache::Fill> fill;
  std::uint64_t cache_max = 0;
  {
    std::lock_guard lock(m_d.m_mutex);
    cache_max = m_d.m_config.daemon.cache_max_bytes;
  }
  if (cache::changed_near(c.identity, c.started)) {
    out.why_uncached = "source modified during or just before staging";
  } else if (c.identity.bytes > cache_max) {
    out.why_uncached = "larger than the node cache";
  } else {
    std::lock_guard lock(m_d.m_mutex);
    auto begun = m_store->begin_fill(c.key, c.service.uid, c.service.gid);
    if (begun) {
      m_d.m_fill_dirs.insert(begun->name);
      fill = std::move(*begun);
    } else {
      out.why_uncached = "the node cache could not store it";
      spdlog::warn("job {}: {}: no cache fill ({})", m_job.job_id, src.path, begun.error().message);
    }
  }
  // The cache's fill follows the spool as it is written (an archive or a tree: what is unpacked;
  // a zip is read whole first, a plain file's spool becomes its entry as it is).
  std::shared_ptr<FollowFill> follow;
  if (fill && !d.seek_first && d.content != stage::StreamContent::plain_file) {
    if (auto v = ipc::SharedMemory<cache::SpoolVerdict>::make()) {
      follow = std::make_shared<FollowFill>();
      follow->dir = UniqueFd(::fcntl(fill->dir.get(), F_DUPFD_CLOEXEC, 0));
      follow->tree = src.kind == stage::SourceKind::dir;
      follow->room = d.room;
      follow->source = src.path;
      follow->verdict.emplace(std::move(*v));
      std::lock_guard lock(m_d.m_mutex);
      if (m_fill_wait) {
        m_d.offer_follow_locked(*m_fill_wait, follow); // started when a second job waits for this source
      }
    }
  }
  auto abandon_follow = [&] {
    if (!follow) {
      return;
    }
    follow->verdict->get()->state.store(static_cast<std::uint64_t>(cache::SpoolState::dropped));
    std::optional<ipc::Child> running;
    {
      std::lock_guard lock(m_d.m_mutex);
      follow->abandoned = true;
      running = std::move(follow->child);
      follow->child.reset();
    }
    if (running) {
      running->kill(); // before its directory goes
    }
    follow.reset();
  };
  auto drop_fill = [&] {
    abandon_follow();
    if (fill) {
      std::lock_guard lock(m_d.m_mutex);
      m_d.remove_later_locked(m_store, *fill); // by the GC thread
      fill.reset();
    }
  };
  auto fail = [&](Error e) -> Error {
    drop_fill();
    return e;
  };

  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return fail(Error::from_errno("pipe"));
  }
  UniqueFd feed_rd(p[0]);
  UniqueFd feed_wr(p[1]);
  // A directory arrives from the job user's reader as a tar stream; a file is read as it is.
  UniqueFd tree_rd;
  std::optional<ipc::Child> reader;
  if (src.kind == stage::SourceKind::dir) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      return fail(Error::from_errno("pipe"));
    }
    tree_rd = UniqueFd(p[0]);
    UniqueFd tree_wr(p[1]);
    const std::string path = src.path;
    const std::string shown = src.shown;
    auto r = ipc::spawn_as(m_user, {src_fd, tree_wr.get()}, [&](int sock, const std::vector<int>& kept) {
      auto s = cache::stream_tree(kept[0], kept[1], path, shown);
      ::close(kept[1]);
      if (!s) {
        (void)ipc::send_message(sock, proto::child_failure(s.error()));
        return 1;
      }
      (void)ipc::send_message(sock,
                              proto::child_message(proto::TreeStreamed{s->identity.key, s->changed, s->identity.newest_ns}));
      return 0;
    });
    if (!r) {
      return fail(r.error());
    }
    reader = std::move(*r);
  }
  // A zip names its entries' types at its end: it is read into the spool first and delivered from
  // there (seekable), not as it streams past.
  std::optional<ipc::Child> delivery;
  if (!d.seek_first) {
    auto spawned = spawn_delivery(feed_rd.get(), d);
    if (!spawned) {
      return fail(spawned.error());
    }
    delivery = std::move(*spawned);
  }
  feed_rd.reset();
  // The bytes read so far, as the service side counts them: what the job and `stagehand status`
  // see, and what keeps jobs waiting on this read from giving up on it.
  auto counters = ipc::SharedMemory<archive::WorkCounters>::make();
  if (!counters) {
    return fail(counters.error());
  }
  archive::WorkCounters* const done = counters->get();
  cache::SpoolPolicy policy;
  policy.max_bytes = cache_max;
  policy.max_stall = k_spool_stall;
  const int in_fd = reader ? tree_rd.get() : c.read_fd;
  std::vector<int> keep{in_fd, feed_wr.get(), counters->fd()};
  if (fill) {
    keep.push_back(fill->dir.get());
  }
  if (!reader && ::lseek(c.read_fd, 0, SEEK_SET) != 0) {
    return fail(Error::from_errno(src.shown + ": cannot rewind"));
  }
  auto tee = ipc::spawn_as(c.service, keep, [&](int sock, const std::vector<int>& kept) {
    auto shared = ipc::SharedMemory<archive::WorkCounters>::attach(kept[2]);
    if (!shared) {
      (void)ipc::send_message(sock, proto::child_failure(shared.error()));
      return 1;
    }
    UniqueFd spool;
    if (kept.size() > 3) {
      spool = UniqueFd(::openat(kept[3], cache::k_spool_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    }
    auto r = cache::tee_source(kept[0], kept[1], spool.get(), policy, shared->get());
    if (!r) {
      (void)ipc::send_message(sock, proto::child_failure(r.error().with_context(src.shown)));
      return 1;
    }
    const std::string dropped = kept.size() > 3 && !spool.valid() ? "the spool could not be made" : r->spool_dropped;
    (void)ipc::send_message(sock, proto::child_message(proto::Teed{r->bytes, dropped}));
    return 0;
  });
  feed_wr.reset();
  tree_rd.reset();
  counters->handed_out();
  if (!tee) {
    if (delivery) {
      delivery->kill();
    }
    if (reader) {
      reader->kill();
    }
    return fail(tee.error());
  }
  const std::uint64_t total = c.identity.bytes;
  auto status = [&] {
    fill_alive();
    return proto::Progress{src.shown, done->bytes.load(std::memory_order_relaxed), total, c.seconds()};
  };
  auto kill_all = [&] {
    if (delivery) {
      delivery->kill();
    }
    tee->kill();
    if (reader) {
      reader->kill();
    }
  };
  // The job's side first: its answer is the job's answer (a corrupt archive, out of room).
  // A delivery that ends early because the read failed (a truncated stream to it) says what the
  // read said: the reader's error is sent before its end closes the pipe.
  auto reader_failure = [&](Error seen) -> Error {
    if (auto m = ipc::receive_message(tee->sock(), std::chrono::milliseconds(100)); m) {
      if (auto r = proto::parse_child_message<proto::Teed>(m->text); !r) {
        return r.error();
      }
    }
    return seen;
  };
  Result<stage::Delivered> delivered = Error::internal("not delivered");
  if (delivery) {
    auto delivered_msg = await(*delivery, status);
    if (delivered_msg) {
      delivered = delivered_by(*delivered_msg);
    }
    if (!delivered_msg || !delivered) {
      Error e = reader_failure(delivered_msg ? delivered.error() : delivered_msg.error());
      kill_all();
      return fail(e);
    }
  }
  auto tee_msg = await(*tee, status);
  std::optional<Result<ipc::Message>> read_msg;
  if (reader) {
    read_msg = await(*reader, status);
  }
  kill_all(); // each leads its own process group: whatever they forked ends here
  if (!tee_msg) {
    return fail(tee_msg.error());
  }
  auto teed = proto::parse_child_message<proto::Teed>(tee_msg->text);
  if (!teed) {
    return fail(teed.error());
  }
  bool changed = false;
  if (reader) {
    if (!*read_msg) {
      return fail(read_msg->error());
    }
    auto read = proto::parse_child_message<proto::TreeStreamed>((*read_msg)->text);
    if (!read) {
      return fail(read.error());
    }
    changed = read->key != c.identity.key || read->changed ||
              cache::changed_near(cache::SourceIdentity{"", 0, 0, read->newest_ns}, c.started);
  } else {
    auto again = cache::identify_file(src_fd, src.path, d.unpack);
    changed = !again || again->key != c.identity.key;
  }
  const std::string dropped = teed->dropped;
  if (!delivery) {
    // From the spool when it holds the source, else from the source itself (read again: the
    // cache could not keep it).
    UniqueFd spool;
    if (fill && dropped.empty()) {
      spool = UniqueFd(::openat(fill->dir.get(), cache::k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    }
    if (!spool.valid() && ::lseek(c.read_fd, 0, SEEK_SET) != 0) {
      return fail(Error::from_errno(src.shown + ": cannot rewind"));
    }
    delivered = deliver_from(spool.valid() ? spool.get() : c.read_fd, d, c.seconds);
    if (!delivered) {
      return fail(delivered.error());
    }
  }
  out.delivered = *delivered;
  if (fill && changed) {
    out.why_uncached = "source modified during or just before staging";
  } else if (fill && !dropped.empty()) {
    out.why_uncached = "not cached: " + dropped;
    spdlog::info("job {}: {}: not cached ({})", m_job.job_id, src.path, dropped);
    std::lock_guard lock(m_d.m_mutex);
    ++m_d.m_counters.fills_dropped;
  }
  if (out.why_uncached.empty() && fill) {
    out.spool = std::move(fill);
    out.spool_bytes = teed->bytes;
    if (follow) {
      follow->verdict->get()->state.store(static_cast<std::uint64_t>(cache::SpoolState::complete));
      out.follow = std::move(follow);
    }
  } else {
    drop_fill();
  }
  return out;
}

} // namespace stagehand::daemon
