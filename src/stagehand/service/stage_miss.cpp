// stagehandd's cache miss: the source is read once, by the service user's side (a directory: by
// the job user's reader, whose tar stream the service side reads), and every byte goes at once to
// the job (unpacked or copied into its directory by a child with the job user's credentials, as
// staging without the daemon would; a directory of large files copied by its reader itself) and to
// a spool in the cache's fill directory. A read for the cache alone (jobs starting together, all
// waiting for the entry) writes no spool: its bytes go straight to the cache's fill.
// The job's reply does not wait for the cache: the spool is unpacked into an entry by a fill the
// fill thread runs after the read, or beside it (following the spool as it grows) once another
// job waits for this source, at a lower priority (fill_thread.cpp). Jobs asking for the same source meanwhile wait for
// that entry or deliver from the spool: no second read of the shared filesystem.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/proto/child_messages.hpp"
#include "stagehand/service/child_reply.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/cache/stage_plan.hpp"
#include "stagehand/cache/tree_read.hpp"
#include "stagehand/fs/offset.hpp"
#include "stagehand/ipc/shared_memory.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagehand::service {

using nlohmann::json;

Result<ipc::Child> StageRequest::spawn_delivery(int in_fd, const Delivery& d)
{
  if (client_left()) { // (the node's lock held a while: the job stages without the daemon by now)
    return Error::io("the client went away", EPIPE);
  }
  const stage::DeliverTo to{m_job_fd.get(), d.src->dest, d.room, nullptr};
  const std::string shown = d.src->shown;
  return ipc::spawn_as(m_user, {in_fd, m_job_fd.get()}, [&, to](int sock, const std::vector<int>& kept) {
    stage::DeliverTo mine = to;
    mine.tmpdir_fd = kept[1];
    return reply_to_parent(sock, stage::deliver(kept[0], d.content, d.file_stat, mine, shown));
  });
}

Result<stage::Delivered> StageRequest::delivered_by(const ipc::Message& m) const
{
  return proto::parse_child_message<stage::Placed>(m.text);
}

Result<stage::Delivered> StageRequest::deliver_from(int in_fd, const Delivery& d,
                                                    const std::function<double()>& seconds)
{
  auto child = spawn_delivery(in_fd, d);
  if (!child) {
    return child.error();
  }
  struct stat st {};
  const std::uint64_t total = ::fstat(in_fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  auto msg = await(*child, [&] {
    // The child reads through the same open file: its offset, never waiting on a stalled read.
    return proto::Progress{d.src->shown, fs::file_offset(in_fd), total, seconds()};
  });
  if (!msg) {
    return msg.error();
  }
  (void)child->wait();
  return delivered_by(*msg);
}

// One miss's read, its children and its spool (StageRequest::miss), in steps.
struct StageRequest::MissRead
{
  MissRead(StageRequest& run, const Delivery& delivery, int source_fd, const MissContext& context)
    : r(run), d(delivery), src(*delivery.src), src_fd(source_fd), c(context),
      reader_copies(src.kind == stage::SourceKind::dir && d.into == DeliverInto::job_directory &&
                    cache::tree_delivery(c.identity) == cache::TreeDelivery::reader_copies)
  {
  }

  StageRequest& r;
  const Delivery& d;
  const proto::SourceSpec& src;
  int src_fd;
  const MissContext& c;
  const bool reader_copies; // a directory whose reader makes the job's copy itself (else a delivery does)
  bool stopped = false;     // a child of the job user's was stopped: the read was ended
  Missed out;
  std::uint64_t cache_max = 0;
  std::optional<cache::Fill> fill;     // the spool's directory: only for what may be cached
  std::shared_ptr<FollowFill> follow;  // the cache's fill following the spool, if offered
  UniqueFd feed_rd, feed_wr;           // the read's bytes to the job's delivery
  UniqueFd tree_rd;                    // a directory's tar stream from the job user's reader
  std::optional<ipc::Child> reader;    // that reader (a directory): with reader_copies, the job's copy too
  std::optional<ipc::Child> delivery;  // the job user's delivery (not for a zip: from the spool after;
                                       // not with reader_copies)
  std::optional<ipc::SharedMemory<archive::WorkCounters>> counters; // the tee's bytes, for progress
  std::optional<ipc::SharedMemory<archive::WorkCounters>> copied;   // a directory's copy's, instead
  std::optional<ipc::Child> tee;       // the service user's one read, to the job and the spool
  // A read into the cache alone (jobs starting together, all waiting for the entry) has no spool:
  // the service user's fill reads the tee's pipe as the job's delivery would.
  enum class CacheFill { from_spool, from_pipe };
  CacheFill cache_fill = CacheFill::from_spool;
  std::optional<ipc::Child> filler; // CacheFill::from_pipe: that fill

  Result<Missed> run();
  Status start();
  void begin_spool();
  void offer_follow();
  Status start_filler();
  Status await_filler();
  Error cause(Error read_failure, const Status& made);
  Error fill_failed(const Error& e);
  void abandon_follow();
  void drop_fill();
  Error fail(Error e)
  {
    drop_fill();
    return stopped ? Error::io("the staging process was stopped (SIGSTOP)", EINTR) : e;
  }
  Status start_reader();
  Result<proto::TreeStreamed> read_tree_as_user(const std::vector<int>& kept);
  Status start_delivery();
  Status start_tee();
  void kill_all();
  proto::Progress status();
  Error reader_failure(Error seen);
  Result<proto::TreeStreamed> read_said(const Result<ipc::Message>& msg);
  Result<proto::Teed> tee_said(const Result<ipc::Message>& msg) const;
  Result<bool> source_changed(const std::optional<Result<proto::TreeStreamed>>& read);
  Result<stage::Delivered> deliver_after(const std::string& dropped);
  void settle(bool changed, const proto::Teed& teed);
};

Result<StageRequest::Missed> StageRequest::miss(const Delivery& d, int src_fd, const MissContext& c)
{
  MissRead m(*this, d, src_fd, c);
  return m.run();
}

Result<StageRequest::Missed> StageRequest::MissRead::run()
{
  begin_spool();
  if (d.into == DeliverInto::cache_only && !fill) {
    return Error::io("not read into the node cache: " + out.why_uncached, ENOSPC);
  }
  if (auto st = start(); !st) {
    return fail(st.error());
  }
  // The job's side first: its answer is the job's answer (a corrupt archive, out of room).
  Result<stage::Delivered> delivered = Error::internal("not delivered");
  std::optional<Result<proto::TreeStreamed>> read;
  if (reader_copies) { // a directory of large files: the reader made the job's copy
    read = read_said(r.await(*reader, [&] { return status(); }));
    if (!*read) {
      kill_all();
      return fail(read->error());
    }
    delivered = stage::Delivered{stage::Placement::copied, (*read)->files, (*read)->bytes, (*read)->created};
    if (!(*read)->dropped.empty()) {
      tee->kill(); // the spool is not the tree: nothing to wait for
    }
  } else if (delivery) {
    auto delivered_msg = r.await(*delivery, [&] { return status(); });
    if (delivered_msg) {
      delivered = r.delivered_by(*delivered_msg);
    }
    if (!delivered_msg || !delivered) {
      Error e = reader_failure(delivered_msg ? delivered.error() : delivered_msg.error());
      kill_all();
      return fail(e);
    }
  }
  // A read for the cache alone runs on a thread of its own: the client hears from the request's.
  const auto frames = d.into == DeliverInto::cache_only ? Frames::none : Frames::sent;
  auto tee_msg = r.await(*tee, [&] { return status(); }, frames);
  if (reader && !read) {
    read = read_said(r.await(*reader, [&] { return status(); }, frames));
  }
  kill_all(); // each leads its own process group: whatever they forked ends here
  const Status made = await_filler(); // (ended too, whatever the read said)
  auto teed = tee_said(tee_msg);
  if (!teed && reader_copies && read && *read) { // the job has its copy from the reader: the tee was the cache's alone
    const std::string& why = (*read)->dropped;
    if (why.empty()) {
      spdlog::warn("job {}: {}: not cached (the read for the cache failed: {})", r.m_job.job_id, src.path,
                   teed.error().message);
    }
    teed = proto::Teed{0, why.empty() ? "the read for the cache failed" : why};
  }
  if (!teed) {
    return fail(cause(teed.error(), made));
  }
  auto changed = source_changed(read);
  if (!changed || !made) {
    return fail(changed ? fill_failed(made.error()) : cause(changed.error(), made));
  }
  if (read && teed->dropped.empty()) {
    teed->dropped = (*read)->dropped; // the reader's stream stopped: the spool is not the tree
  }
  if (d.into == DeliverInto::cache_only) {
    settle(*changed, *teed);
    return std::move(out); // nothing delivered: the cache's fill (or its spool) is all
  }
  if (!delivered) {
    delivered = deliver_after(teed->dropped);
    if (!delivered) {
      return fail(delivered.error());
    }
  }
  out.delivered = *delivered;
  settle(*changed, *teed);
  return std::move(out);
}

// The read's children: the reader (a directory), the job's delivery or the cache's fill, the tee.
Status StageRequest::MissRead::start()
{
  if (r.client_left() && d.into == DeliverInto::job_directory) { // (a reader may copy into the job's directory)
    return Error::io("the client went away", EPIPE);
  }
  const bool plain = d.content == stage::StreamContent::plain_file;
  if (d.into == DeliverInto::cache_only && cache::fill_follows_spool(plain, d.seek_first)) {
    cache_fill = CacheFill::from_pipe;
  }
  offer_follow();
  if (auto st = start_reader(); !st) {
    return st;
  }
  if (auto st = start_delivery(); !st) {
    return st;
  }
  return start_tee();
}

// The spool: only for what may be cached (read long enough after its last change, and not larger
// than the whole cache).
void StageRequest::MissRead::begin_spool()
{
  {
    std::lock_guard lock(r.m_node.mutex);
    cache_max = r.m_node.config.daemon.cache_max_bytes;
  }
  out.why_uncached = cache::uncached_before_read(c.identity, c.started, cache_max);
  if (!out.why_uncached.empty()) {
    return;
  }
  auto begun = r.m_node.keeper.begin_fill(r.m_store, c.key, c.service.uid, c.service.gid); // its name in use
  if (begun) {
    fill = std::move(*begun);
  } else {
    out.why_uncached = "the node cache could not store it";
    spdlog::warn("job {}: {}: no cache fill ({})", r.m_job.job_id, src.path, begun.error().message);
  }
}

// The cache's fill follows the spool as it is written, once a second job waits for this source.
void StageRequest::MissRead::offer_follow()
{
  const bool plain = d.content == stage::StreamContent::plain_file;
  if (!fill || cache_fill == CacheFill::from_pipe || !cache::fill_follows_spool(plain, d.seek_first)) {
    return;
  }
  auto v = ipc::SharedMemory<cache::SpoolVerdict>::make();
  if (!v) {
    return;
  }
  follow = std::make_shared<FollowFill>();
  follow->dir = UniqueFd(::fcntl(fill->dir.get(), F_DUPFD_CLOEXEC, 0));
  follow->tree = src.kind == stage::SourceKind::dir;
  follow->room = d.room;
  follow->source = src.path;
  follow->verdict.emplace(std::move(*v));
  std::lock_guard lock(r.m_node.mutex);
  if (r.m_fill_wait) {
    r.m_fills.offer_follow_locked(*r.m_fill_wait, follow); // started when a second job waits for this source
  }
}

void StageRequest::MissRead::abandon_follow()
{
  if (!follow) {
    return;
  }
  follow->verdict->get()->state.store(static_cast<std::uint64_t>(cache::SpoolState::dropped));
  std::optional<ipc::Child> running;
  {
    std::lock_guard lock(r.m_node.mutex);
    follow->abandoned = true;
    running = std::move(follow->child);
    follow->child.reset();
  }
  if (running) {
    running->kill(); // before its directory goes
  }
  follow.reset();
}

void StageRequest::MissRead::drop_fill()
{
  abandon_follow();
  if (filler) {
    filler->kill(); // before its directory goes
  }
  if (fill) {
    std::lock_guard lock(r.m_node.mutex);
    r.m_node.keeper.remove_later_locked(r.m_store, *fill); // by the GC thread
    fill.reset();
  }
}

// The pipe to the job's delivery, and a directory's tar stream from the job user's reader (a file
// is read as it is).
Status StageRequest::MissRead::start_reader()
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  feed_rd = UniqueFd(p[0]);
  feed_wr = UniqueFd(p[1]);
  if (src.kind != stage::SourceKind::dir) {
    return ok_status();
  }
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  tree_rd = UniqueFd(p[0]);
  UniqueFd tree_wr(p[1]);
  (void)::fcntl(tree_wr.get(), F_SETPIPE_SZ, 1 << 20); // the stream's MiB writes at once; best effort
  std::vector<int> keep{src_fd, tree_wr.get()};
  if (reader_copies) {
    auto made = ipc::SharedMemory<archive::WorkCounters>::make();
    if (!made) {
      return made.error();
    }
    copied.emplace(std::move(*made));
    keep.push_back(r.m_job_fd.get()); // the reader copies the tree there as it streams it
    keep.push_back(copied->fd());
  }
  auto spawned = ipc::spawn_as(r.m_user, keep, [&](int sock, const std::vector<int>& kept) {
    auto s = read_tree_as_user(kept);
    const int said = reply_to_parent(sock, s); // before the stream ends: a delivery cut short finds why
    ::close(kept[1]);
    return said;
  });
  if (copied) {
    copied->handed_out();
  }
  if (!spawned) {
    return spawned.error();
  }
  reader = std::move(*spawned);
  return ok_status();
}

// In the reader (the job user): the directory `kept[0]` as a tar stream to `kept[1]`, and, with
// the job's directory `kept[2]`, copied to DEST there from the same reads (stage::deliver_dir: on
// an error nothing of it stays), its bytes counted in `kept[3]` for progress.
Result<proto::TreeStreamed> StageRequest::MissRead::read_tree_as_user(const std::vector<int>& kept)
{
  Result<cache::TreeRead> read = Error::internal("not read");
  stage::CreatedName created; // what the copy into the job's directory created
  if (kept.size() > 3) {
    auto progress = ipc::SharedMemory<archive::WorkCounters>::attach(kept[3]);
    if (!progress) {
      return progress.error();
    }
    const stage::DeliverTo to{kept[2], src.dest, d.room, nullptr};
    auto placed = stage::deliver_dir(to, [&](int dest) -> Result<stage::Delivered> {
      read = cache::read_tree(kept[0], dest, kept[1], d.room, src.path, src.shown, {{}, progress->get()});
      if (!read) {
        return read.error();
      }
      return stage::Delivered{stage::Placement::copied, read->copied.files, read->copied.bytes};
    });
    if (!placed) {
      return placed.error();
    }
    created = placed->created;
  } else {
    read = cache::read_tree(kept[0], -1, kept[1], 0, src.path, src.shown);
  }
  if (!read) {
    return read.error();
  }
  const cache::SourceIdentity& id = read->streamed.identity;
  return proto::TreeStreamed{id.key,           read->streamed.changed, id.newest_ns,
                             read->stream_dropped, read->copied.files,  read->copied.bytes,
                             created};
}

// A zip names its entries' types at its end: it is read into the spool first and delivered from
// there (seekable), not as it streams past. A read for the cache alone has no delivery: its pipe
// goes to the cache's fill.
Status StageRequest::MissRead::start_delivery()
{
  if (d.into == DeliverInto::job_directory && !d.seek_first && !reader_copies) {
    auto spawned = r.spawn_delivery(feed_rd.get(), d);
    if (!spawned) {
      return spawned.error();
    }
    delivery = std::move(*spawned);
  }
  if (cache_fill == CacheFill::from_pipe) {
    if (auto st = start_filler(); !st) {
      return st;
    }
  }
  feed_rd.reset();
  return ok_status();
}

// The fill of a read into the cache alone, as the service user: the pipe's bytes (an archive, or a
// directory's tar stream) unpacked into the fill directory as they come.
Status StageRequest::MissRead::start_filler()
{
  const bool tree = src.kind == stage::SourceKind::dir;
  const std::vector<int> keep{feed_rd.get(), fill->dir.get()};
  auto spawned = ipc::spawn_as(c.service, keep, [&](int sock, const std::vector<int>& kept) {
    return reply_to_parent(sock, tree ? cache::fill_from_stream(kept[0], kept[1], d.room, src.path)
                                      : cache::fill_from_archive_stream(kept[0], kept[1], d.room, src.path));
  });
  if (!spawned) {
    return spawned.error();
  }
  filler = std::move(*spawned);
  return ok_status();
}

// That fill's word, once it has ended with all it started (nothing of it may write on into the
// fill that is sealed next): what it made, for the fill thread to seal and publish.
Status StageRequest::MissRead::await_filler()
{
  if (!filler) {
    return ok_status();
  }
  auto said = r.await(*filler, [&] { return status(); }, Frames::none);
  Result<cache::FillResult> made = said ? proto::parse_child_message<stage::Placed>(said->text)
                                        : Result<cache::FillResult>(said.error());
  if (auto ended = filler->wait(); made && !ended) {
    made = ended.error();
  }
  if (!made) {
    return made.error();
  }
  out.filled = *made;
  return ok_status();
}

// Why the read failed: its own failure, unless that is only the pipe the cache's fill closed (a
// directory's reader writing on), when the fill's is the cause.
Error StageRequest::MissRead::cause(Error read_failure, const Status& made)
{
  return !made && read_failure.code == EPIPE ? fill_failed(made.error()) : read_failure;
}

Error StageRequest::MissRead::fill_failed(const Error& e)
{
  std::lock_guard lock(r.m_node.mutex);
  ++r.m_node.counters.fills_dropped;
  return e.with_context("the cache's fill");
}

// The service user's one read of the source (or of the reader's stream), to the job and the spool.
Status StageRequest::MissRead::start_tee()
{
  // The bytes read so far, as the service side counts them: what the job and `stagehand status`
  // see, and what keeps jobs waiting on this read from giving up on it.
  auto made = ipc::SharedMemory<archive::WorkCounters>::make();
  if (!made) {
    return made.error();
  }
  counters.emplace(std::move(*made));
  cache::SpoolPolicy policy;
  policy.max_bytes = cache_max;
  const int in_fd = reader ? tree_rd.get() : c.read_fd;
  std::vector<int> keep{in_fd, feed_wr.get(), counters->fd()};
  if (fill && cache_fill == CacheFill::from_spool) {
    keep.push_back(fill->dir.get()); // where the spool goes
  }
  if (!reader && ::lseek(c.read_fd, 0, SEEK_SET) != 0) {
    return Error::from_errno(src.shown + ": cannot rewind");
  }
  auto spawned = ipc::spawn_as(c.service, keep, [&](int sock, const std::vector<int>& kept) {
    auto shared = ipc::SharedMemory<archive::WorkCounters>::attach(kept[2]);
    if (!shared) {
      (void)ipc::send_message(sock, proto::child_failure(shared.error()));
      return 1;
    }
    UniqueFd spool;
    if (kept.size() > 3) {
      spool = UniqueFd(::openat(kept[3], cache::k_spool_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    }
    auto teed = cache::tee_source(kept[0], kept[1], spool.get(), policy, shared->get());
    if (!teed) {
      (void)ipc::send_message(sock, proto::child_failure(teed.error().with_context(src.shown)));
      return 1;
    }
    const std::string dropped = kept.size() > 3 && !spool.valid() ? "the spool could not be made" : teed->spool_dropped;
    (void)ipc::send_message(sock, proto::child_message(proto::Teed{teed->bytes, dropped}));
    return 0;
  });
  feed_wr.reset();
  tree_rd.reset();
  counters->handed_out();
  if (!spawned) {
    kill_all();
    return spawned.error();
  }
  tee = std::move(*spawned);
  return ok_status();
}

void StageRequest::MissRead::kill_all()
{
  if (delivery) {
    delivery->kill();
  }
  if (tee) {
    tee->kill();
  }
  if (reader) {
    reader->kill();
  }
}

proto::Progress StageRequest::MissRead::status()
{
  // The job user may stop their reader or delivery (SIGSTOP, a tracer): the read would wait on it
  // for ever, and every job waiting for this source with it. Ended, as a stopped child awaited is.
  if ((reader && reader->stopped()) || (delivery && delivery->stopped())) {
    stopped = true;
    kill_all();
  }
  r.fill_alive();
  // A directory's copy is the job's progress (and the sign of life jobs waiting on this read
  // watch); the tee's bytes are the stream's, which may stop before the copy does.
  const auto& done = copied ? *copied->get() : *counters->get();
  return proto::Progress{src.shown, done.bytes.load(std::memory_order_relaxed), c.identity.bytes, c.seconds()};
}

// A delivery that ends early because the read failed (a truncated stream to it) says what the
// read said: each reading child's error is sent before its end closes the pipe. The tee reads a
// file itself; a directory is read by the reader (the job user's), which streams it to the tee.
// A tee that ended without a word (killed) cut the stream short too: not the archive's fault.
Error StageRequest::MissRead::reader_failure(Error seen)
{
  if (reader) {
    if (auto m = ipc::receive_message(reader->sock(), std::chrono::milliseconds(100)); m) {
      if (auto said = proto::parse_child_message<proto::TreeStreamed>(m->text); !said) {
        return said.error();
      }
    }
  }
  auto m = ipc::receive_message(tee->sock(), std::chrono::milliseconds(100));
  if (m) {
    if (auto said = proto::parse_child_message<proto::Teed>(m->text); !said) {
      return said.error();
    }
  } else if (m.error().code != ETIMEDOUT && seen.kind == ErrorKind::corrupt) {
    return Error::io(src.shown + ": the read of the source ended early (" + tee->why_closed(m.error()).message + ")",
                     EIO);
  }
  return seen;
}

Result<proto::Teed> StageRequest::MissRead::tee_said(const Result<ipc::Message>& msg) const
{
  if (!msg) {
    return msg.error();
  }
  auto teed = proto::parse_child_message<proto::Teed>(msg->text);
  if (teed && cache_fill == CacheFill::from_pipe) {
    teed->dropped.clear(); // ("no spool": none was asked for; the fill read the pipe, and says how it went)
  }
  return teed;
}

Result<proto::TreeStreamed> StageRequest::MissRead::read_said(const Result<ipc::Message>& msg)
{
  if (!msg) {
    return msg.error();
  }
  return proto::parse_child_message<proto::TreeStreamed>(msg->text);
}

// Whether the source changed while it was read (its entry would not be what was read).
Result<bool> StageRequest::MissRead::source_changed(const std::optional<Result<proto::TreeStreamed>>& read)
{
  if (!read) {
    auto again = cache::identify_file(src_fd, src.path, d.unpack);
    return !again || again->key != c.identity.key;
  }
  if (!*read) {
    return read->error();
  }
  const proto::TreeStreamed& said = **read;
  return said.key != c.identity.key || said.changed ||
         cache::changed_near(cache::SourceIdentity{"", 0, 0, said.newest_ns}, c.started);
}

// A zip, delivered once read: from the spool when it holds the source, else from the source
// itself (read again: the cache could not keep it).
Result<stage::Delivered> StageRequest::MissRead::deliver_after(const std::string& dropped)
{
  UniqueFd spool;
  if (fill && dropped.empty()) {
    spool = UniqueFd(::openat(fill->dir.get(), cache::k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  }
  if (!spool.valid() && ::lseek(c.read_fd, 0, SEEK_SET) != 0) {
    return Error::from_errno(src.shown + ": cannot rewind");
  }
  return r.deliver_from(spool.valid() ? spool.get() : c.read_fd, d, c.seconds);
}

// The spool goes to the cache, or is dropped saying why.
void StageRequest::MissRead::settle(bool changed, const proto::Teed& teed)
{
  if (fill) {
    const std::string why = cache::uncached_after_read(changed, teed.dropped);
    if (!why.empty()) {
      out.why_uncached = why;
    }
    if (!changed && !teed.dropped.empty()) {
      spdlog::info("job {}: {}: not cached ({})", r.m_job.job_id, src.path, teed.dropped);
      std::lock_guard lock(r.m_node.mutex);
      ++r.m_node.counters.fills_dropped;
    }
  }
  if (out.why_uncached.empty() && fill) {
    out.spool = std::move(fill);
    out.spool_bytes = cache_fill == CacheFill::from_pipe ? 0 : teed.bytes; // (the fill made: no spool waits)
    if (follow) {
      follow->verdict->get()->state.store(static_cast<std::uint64_t>(cache::SpoolState::complete));
      out.follow = std::move(follow);
    }
  } else {
    drop_fill();
  }
}

} // namespace stagehand::service
