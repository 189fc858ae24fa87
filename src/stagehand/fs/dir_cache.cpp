// DirCache: the deepest cached ancestor first, then one openat (or mkdirat) per missing level.
#include "stagehand/fs/dir_cache.hpp"

#include "stagehand/util/strings.hpp"

#include <fcntl.h>
#include <sys/stat.h>

namespace stagehand::fs {

DirCache::DirCache(int root_fd) : m_root(std::make_shared<const UniqueFd>(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0))) {}

Result<SharedFd> DirCache::open(const std::vector<std::string>& parts, MissingDirs missing)
{
  if (parts.empty()) {
    return m_root;
  }
  // Entries mostly come in directory order: usually the same directory as the last entry's, else
  // the whole path is cached already.
  if (m_last && parts == m_last_parts) {
    return m_last;
  }
  if (auto hit = m_cache.find(join(parts, "/")); hit != m_cache.end()) {
    m_last_parts = parts;
    m_last = hit->second;
    return hit->second;
  }
  std::vector<std::string> prefixes; // prefixes[i]: the path of parts[0..i]
  prefixes.reserve(parts.size());
  for (const auto& p : parts) {
    prefixes.push_back(prefixes.empty() ? p : prefixes.back() + "/" + p);
  }
  SharedFd cur = m_root;
  std::size_t i = parts.size() - 1;
  for (; i > 0; --i) {
    if (auto it = m_cache.find(prefixes[i - 1]); it != m_cache.end()) {
      cur = it->second;
      break;
    }
  }
  for (; i < parts.size(); ++i) {
    const char* comp = parts[i].c_str();
    const std::string& path = prefixes[i];
    UniqueFd next(::openat(cur->get(), comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid() && errno == ENOENT && missing == MissingDirs::create) {
      if (::mkdirat(cur->get(), comp, 0700) != 0 && errno != EEXIST) {
        return Error::from_errno("cannot create directory " + path);
      }
      ++m_created;
      next.reset(::openat(cur->get(), comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    if (!next.valid()) {
      if (errno == ELOOP || errno == ENOTDIR) {
        return Error::refused("\"" + path + "\" is a symlink or a file, not a directory: refused", errno);
      }
      return Error::from_errno(path);
    }
    if (m_cache.size() >= k_max_entries) {
      m_cache.clear(); // bounded fds; `cur` stays open through its handle
    }
    cur = std::make_shared<const UniqueFd>(std::move(next));
    m_cache.emplace(path, cur);
  }
  m_last_parts = parts;
  m_last = cur;
  return cur;
}

} // namespace stagehand::fs
