// Filling a cache entry as the service user.
#include "stagehand/cache/fill.hpp"

#include "stagehand/cache/store.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagehand::cache {

namespace {

// Files keep their modes without group/other write (FileModes::read_only for unpacked files; a
// copied file is made so here): a cache view shows them as the job's own; a hard-linked hit reads
// them through the "other" bits (a file others may not read is copied into the job instead), and
// take_over makes them root's, so no job writes them. Directories keep their modes without
// group/other write too: a job gets its own directories, made from these modes.
// The mode a cached file keeps: the source's, never group/other write (nor set-id bits).
mode_t cached_file_mode(mode_t source_mode) { return source_mode & 0755; }

Status make_read_only(int fill_dir_fd)
{
  struct stat st {};
  if (::fstatat(fill_dir_fd, k_data_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::from_errno("cache fill");
  }
  if (::fchmodat(fill_dir_fd, k_data_name, cached_file_mode(st.st_mode), 0) != 0) {
    return Error::from_errno("cache fill");
  }
  return ok_status();
}

Result<FillResult> unpack_into(int archive_fd, int fill_dir_fd, std::uint64_t max_bytes, const std::string& shown,
                               archive::WorkCounters* counters = nullptr)
{
  if (::mkdirat(fill_dir_fd, k_data_name, 0700) != 0) {
    return Error::from_errno("cache fill");
  }
  UniqueFd dest(::openat(fill_dir_fd, k_data_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dest.valid()) {
    return Error::from_errno("cache fill");
  }
  archive::ExtractLimits limits;
  limits.max_bytes = max_bytes;
  limits.file_modes = archive::FileModes::read_only; // made read-only as they are written: no second pass
  limits.counters = counters;
  auto stats = archive::extract_archive(archive_fd, dest.get(), limits, shown);
  if (!stats) {
    return stats.error();
  }
  return FillResult{stage::Placement::unpacked, stats->files + stats->hardlinks, stats->bytes};
}

} // namespace

std::string publish_refusal(const PublishCheck& c)
{
  if (!c.read_as_keyed || changed_near(SourceIdentity{"", 0, 0, c.newest_ns}, c.started)) {
    return "source modified during or just before staging";
  }
  if (c.fill_bytes > c.cache_max_bytes) {
    return "larger than the node cache";
  }
  return "";
}

Result<FillResult> fill_from_file(int src_fd, int fill_dir_fd, stage::Unpack unpack, std::uint64_t max_bytes,
                                  const std::string& shown)
{
  if (::lseek(src_fd, 0, SEEK_SET) != 0) {
    return Error::from_errno(shown + ": cannot rewind");
  }
  FillResult result;
  bool archive = false;
  if (unpack == stage::Unpack::if_archive) {
    auto kind = archive::probe_archive(src_fd);
    archive = kind && *kind == archive::ArchiveKind::archive;
  }
  if (archive) {
    auto r = unpack_into(src_fd, fill_dir_fd, max_bytes, shown);
    if (!r) {
      return r.error();
    }
    return *r;
  }
  stage::CopyStats stats;
  if (auto st = stage::copy_file(src_fd, fill_dir_fd, k_data_name, max_bytes, stats, shown); !st) {
    return st.error();
  }
  result = FillResult{stage::Placement::copied, 1, stats.bytes};
  if (auto st = make_read_only(fill_dir_fd); !st) {
    return st.error();
  }
  return result;
}

Result<FillResult> fill_from_plain_spool(int fill_dir_fd, const char* spool_name, mode_t mode)
{
  // Opened without following (the one open of what the service side left), then renamed: the
  // descriptor and the name are the same file, which only the service side could have replaced.
  UniqueFd spool(::openat(fill_dir_fd, spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!spool.valid() || ::fstat(spool.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::io("the spool is not a plain file", EINVAL);
  }
  if (::fchmod(spool.get(), cached_file_mode(mode)) != 0 ||
      ::renameat(fill_dir_fd, spool_name, fill_dir_fd, k_data_name) != 0) {
    return Error::from_errno("cache fill");
  }
  return FillResult{stage::Placement::copied, 1, static_cast<std::uint64_t>(st.st_size)};
}

Result<FillResult> fill_from_stream(int stream_fd, int fill_dir_fd, std::uint64_t max_bytes, const std::string& shown,
                                    archive::WorkCounters* counters)
{
  auto r = unpack_into(stream_fd, fill_dir_fd, max_bytes, shown, counters);
  if (!r) {
    return r;
  }
  r->how = stage::Placement::copied;
  return r;
}

Result<FillResult> fill_from_archive_stream(int stream_fd, int fill_dir_fd, std::uint64_t max_bytes,
                                            const std::string& shown)
{
  return unpack_into(stream_fd, fill_dir_fd, max_bytes, shown);
}

} // namespace stagehand::cache
