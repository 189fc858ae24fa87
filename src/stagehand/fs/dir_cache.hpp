// Directory fds below one root, opened once and reused. Every component is opened with
// O_NOFOLLOW from the one above it, so a symlink (or a file) on the way is refused, never
// followed; missing directories are created 0700. The cache is bounded: past its size it starts
// over, while handles given out stay open for as long as their holders keep them.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace stagehand::fs {

using SharedFd = std::shared_ptr<const UniqueFd>;

// What open() does about a directory that is not there: make it (0700), or fail with ENOENT.
enum class MissingDirs { create, refuse };

class DirCache
{
public:
  // Few enough that an extraction works under `ulimit -n 256` with its writer threads' handles.
  static constexpr std::size_t k_max_entries = 64;

  // `root_fd` stays the caller's; the cache keeps its own duplicate.
  explicit DirCache(int root_fd);

  // The directory `parts` below the root (no parts: the root), created where missing. Errors
  // name the path below the root; a symlink or file on the way is a refusal.
  Result<SharedFd> open(const std::vector<std::string>& parts, MissingDirs missing = MissingDirs::create);

  // Directories this cache created.
  std::uint64_t created() const { return m_created; }

  // Closes every cached fd (handles given out stay open).
  void clear()
  {
    m_cache.clear();
    m_last.reset();
    m_last_parts.clear();
  }

private:
  SharedFd m_root;
  std::unordered_map<std::string, SharedFd> m_cache; // by path below the root ("a/b")
  std::vector<std::string> m_last_parts;             // the last directory asked for
  SharedFd m_last;
  std::uint64_t m_created = 0;
};

} // namespace stagehand::fs
