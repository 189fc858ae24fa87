// stagehandd's stage request, per source, step 1: the job user's side opens and identifies the
// source (a child with their credentials) and hands its descriptor over; a file's key is then
// taken again from that descriptor.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/archive/extract.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/proto/child_messages.hpp"
#include "stagehand/stage/bcast_marker.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagehand::service {

namespace {

// In the job user's child: opens the source, identifies it, probes a file's content (from the
// broadcast's copy below the job's directory `job_fd` when that is the source's size), and sends
// the identity with the descriptors. `expected`: the source's kind, or nullopt for the one the
// descriptor shows. Returns the child's exit status.
int identify_as_user(int sock, const proto::SourceSpec& src, std::optional<stage::SourceKind> expected,
                     const std::vector<std::string>& roots, int job_fd)
{
  auto opened = cache::open_source_as(src.path, src.shown, expected, roots);
  if (!opened) {
    (void)ipc::send_message(sock, proto::child_failure(opened.error()));
    return 1;
  }
  const UniqueFd* fd = &opened->fd;
  const stage::SourceKind kind = opened->is_dir() ? stage::SourceKind::dir : stage::SourceKind::file;
  auto id = kind == stage::SourceKind::dir ? cache::identify_tree(fd->get(), src.path, src.shown)
                                           : cache::identify_file(fd->get(), src.path, src.unpack);
  if (!id) {
    (void)ipc::send_message(sock, proto::child_failure(id.error()));
    return 1;
  }
  // The delivered copy, when it is a regular file of the source's size and the source is still the
  // file the broadcast read (the key comes from this very descriptor): read in its place (the
  // content probed there too: not one more byte of the shared filesystem). A source rewritten
  // since is read itself, so its entry never holds the older bytes under the newer identity.
  UniqueFd copy;
  struct stat source_st {};
  const auto sent = stage::parse_identity(src.delivered_id);
  const bool same_source = src.delivered_id.empty() ||
                           (sent && ::fstat(fd->get(), &source_st) == 0 &&
                            stage::same_source(*sent, stage::identity_of(source_st)));
  if (job_fd >= 0 && same_source) {
    struct stat st {};
    auto c = fs::open_beneath(job_fd, src.delivered, O_RDONLY | O_NONBLOCK);
    if (c && ::fstat(c->get(), &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::uint64_t>(st.st_size) == id->bytes) {
      copy = std::move(*c);
    }
  }
  const int content_fd = copy.valid() ? copy.get() : fd->get();
  bool is_archive = false; // the content decides, as staging without the daemon does
  bool zip = false;
  if (kind == stage::SourceKind::file && src.unpack == stage::Unpack::if_archive) {
    auto kind = archive::probe_archive(content_fd);
    is_archive = kind && *kind == archive::ArchiveKind::archive;
    char magic[2] = {};
    zip = is_archive && ::pread(content_fd, magic, sizeof magic, 0) == 2 && magic[0] == 'P' && magic[1] == 'K';
  }
  std::vector<int> fds{fd->get()};
  if (copy.valid()) {
    fds.push_back(copy.get());
  }
  (void)ipc::send_message(
    sock,
    proto::child_message(proto::SourceIdentified{id->key, id->files, id->bytes, id->newest_ns, is_archive, zip,
                                                 kind == stage::SourceKind::dir}),
    fds);
  return 0;
}

} // namespace

Result<StageRequest::Identified> StageRequest::identify(const proto::SourceSpec& src,
                                                        const std::function<double()>& seconds, KindFrom from)
{
  std::vector<std::string> roots;
  {
    std::lock_guard lock(m_node.mutex);
    roots = m_node.config.stage.allowed_roots;
  }
  // A delivered copy of a file source is opened by the same child, below the job's directory.
  const bool copy_wanted = !src.delivered.empty() && src.kind == stage::SourceKind::file && m_job_fd.valid();
  std::vector<int> keep;
  if (copy_wanted) {
    keep.push_back(m_job_fd.get());
  }
  auto ident_child = ipc::spawn_as(m_user, keep, [&](int sock, const std::vector<int>& kept) {
    const auto expected = from == KindFrom::spec ? std::optional<stage::SourceKind>(src.kind) : std::nullopt;
    return identify_as_user(sock, src, expected, roots, kept.empty() ? -1 : kept[0]);
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
    spdlog::info("job {}: {}: the broadcast's copy {} is not there, not the source's size, or of a source "
                 "changed since it was broadcast: reading the source",
                 m_job.job_id, src.path, src.delivered);
  }
  struct stat st {};
  if (::fstat(src_fd.get(), &st) != 0 || S_ISDIR(st.st_mode) != ident->dir) { // the descriptor's word, not the child's
    return Error::internal(src.shown + ": the user side said it was " + (ident->dir ? "" : "not ") + "a directory");
  }
  cache::SourceIdentity identity{ident->key, ident->files, ident->bytes, ident->newest_ns};
  if (!ident->dir) {
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
  out.dir = ident->dir;
  return out;
}

} // namespace stagehand::service
