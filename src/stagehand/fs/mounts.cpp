// Finding and detaching mounts below a job's directory, fd-relative.
#include "stagehand/fs/mounts.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <climits>

namespace stagehand::fs {

namespace {

// mountinfo writes ' ', '\t', '\n' and '\\' in paths as \ooo.
std::string unescape(std::string_view s)
{
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool octal = s[i] == '\\' && s.size() - i >= 4 && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
                       s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7';
    if (octal) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string_view next_field(std::string_view& line)
{
  const std::size_t sp = line.find(' ');
  std::string_view f = line.substr(0, sp);
  line = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
  return f;
}

bool parse_u64(std::string_view s, std::uint64_t& v)
{
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

// The base's path as this process's mountinfo spells it.
Result<std::string> path_of(int fd)
{
  char buf[PATH_MAX + 1];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  if (n <= 0) {
    return Error::from_errno("cannot tell where the base directory is");
  }
  return std::string(buf, static_cast<std::size_t>(n));
}

// Steps from `parent_fd` onto `last`, crossing onto what is mounted there, without following a
// symlink and without asking the mounted filesystem anything (O_PATH: no open, no getattr).
Result<UniqueFd> step_onto(int parent_fd, const std::string& last)
{
  struct open_how how {};
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = ::syscall(SYS_openat2, parent_fd, last.c_str(), &how, sizeof how);
  if (fd < 0) {
    return Error::from_errno(last);
  }
  return UniqueFd(static_cast<int>(fd));
}

} // namespace

std::vector<MountEntry> parse_mountinfo(std::string_view text)
{
  std::vector<MountEntry> out;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    MountEntry m;
    std::string_view id = next_field(line);
    std::string_view parent = next_field(line);
    next_field(line); // major:minor
    next_field(line); // root within its filesystem
    std::string_view point = next_field(line);
    if (!parse_u64(id, m.id) || !parse_u64(parent, m.parent) || point.empty()) {
      continue;
    }
    m.point = unescape(point);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::uint64_t> mount_id_of(int fd)
{
  UniqueFd proc(::open("/proc/self/fdinfo", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!proc.valid()) {
    return Error::from_errno("/proc/self/fdinfo");
  }
  auto text = read_small_file(proc.get(), std::to_string(fd), 64 * 1024);
  if (!text) {
    return text.error();
  }
  std::string_view t = *text;
  const std::size_t at = t.find("mnt_id:");
  if (at == std::string_view::npos) {
    return Error::io("no mnt_id in /proc/self/fdinfo/" + std::to_string(fd), ENOTSUP);
  }
  t.remove_prefix(at + 7);
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) {
    t.remove_prefix(1);
  }
  std::uint64_t id = 0;
  auto r = std::from_chars(t.data(), t.data() + t.size(), id);
  if (r.ec != std::errc()) {
    return Error::io("unreadable mnt_id in /proc/self/fdinfo/" + std::to_string(fd), EINVAL);
  }
  return id;
}

namespace {

Result<std::string> read_mountinfo()
{
  UniqueFd proc(::open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto text = proc.valid() ? read_small_file(proc.get(), "mountinfo", 64U << 20)
                           : Result<std::string>(Error::from_errno("/proc/self"));
  if (!text) {
    return text.error().with_context("cannot list the mounts");
  }
  return text;
}

} // namespace

Result<std::set<std::string>> entries_with_mounts(int base_fd)
{
  auto base_path = path_of(base_fd);
  auto text = base_path ? read_mountinfo() : Result<std::string>(base_path.error());
  if (!text) {
    return text.error();
  }
  const std::string prefix = (*base_path == "/" ? std::string() : *base_path) + "/";
  std::set<std::string> names;
  for (const auto& m : parse_mountinfo(*text)) {
    if (m.point.size() > prefix.size() && m.point.starts_with(prefix)) {
      names.insert(m.point.substr(prefix.size(), m.point.find('/', prefix.size()) - prefix.size()));
    }
  }
  return names;
}

Result<std::vector<std::string>> detach_mounts_below(int base_fd, const std::string& name)
{
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Error::refused("\"" + name + "\" is not an entry of the base directory");
  }
  auto base_path = path_of(base_fd);
  auto base_id = base_path ? mount_id_of(base_fd) : Result<std::uint64_t>(base_path.error());
  if (!base_id) {
    return base_id.error();
  }
  const std::string top = (*base_path == "/" ? std::string() : *base_path) + "/" + name;
  std::vector<std::string> detached;
  // Each round detaches the topmost mount at each mount point (a lazy detach takes the mounts
  // inside it along); mounts stacked on one point go one round each. Bounded: a user cannot keep
  // it busy forever by mounting faster than it detaches.
  for (int round = 0; round < 64; ++round) {
    auto text = read_mountinfo();
    if (!text) {
      return text.error();
    }
    bool any = false;
    for (const auto& m : parse_mountinfo(*text)) {
      // The string only picks candidates; the fd walk below decides.
      if (m.point != top && !m.point.starts_with(top + "/")) {
        continue;
      }
      const std::string rel = m.point.substr(base_path->size() + (*base_path == "/" ? 0 : 1));
      const std::size_t slash = rel.rfind('/');
      const std::string parent_rel = slash == std::string::npos ? std::string() : rel.substr(0, slash);
      const std::string last = slash == std::string::npos ? rel : rel.substr(slash + 1);
      if (last.empty() || last == "." || last == "..") {
        continue;
      }
      // Up to the mount point's parent on the base's own mount: inside another mount (one this
      // round detaches with its parent) or hidden, it is not reached, and waits.
      auto parent = open_beneath(base_fd, parent_rel, O_PATH | O_DIRECTORY);
      auto parent_id = parent ? mount_id_of(parent->get()) : Result<std::uint64_t>(parent.error());
      if (!parent_id || *parent_id != *base_id) {
        continue;
      }
      auto onto = step_onto(parent->get(), last);
      auto id = onto ? mount_id_of(onto->get()) : Result<std::uint64_t>(onto.error());
      if (!id || *id == *base_id) {
        continue; // not mounted (any more): nothing to detach
      }
      // Following the magic link lands on exactly the fd's mount and dentry (UMOUNT_NOFOLLOW would
      // refer to the /proc link itself and fail); nothing on the way is a path a user controls.
      const std::string via = "/proc/self/fd/" + std::to_string(onto->get());
      if (::umount2(via.c_str(), MNT_DETACH) != 0) {
        return Error::from_errno("cannot detach the mount on " + rel);
      }
      detached.push_back(rel);
      any = true;
    }
    if (!any) {
      return detached;
    }
  }
  return Error::io("mounts keep appearing below " + name, EBUSY);
}

} // namespace stagehand::fs
