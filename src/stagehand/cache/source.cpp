// Opening sources, as the job user.
#include "stagehand/cache/source.hpp"

#include "stagehand/stage/source.hpp"


namespace stagehand::cache {

Result<stage::OpenedSource> open_source_as(const std::string& path, const std::string& shown,
                                           std::optional<stage::SourceKind> expected,
                                           const std::vector<std::string>& allowed_roots)
{
  auto opened = stage::open_source(path, expected, allowed_roots);
  if (!opened) {
    if (opened.error().code == ENOENT) {
      return Error::refused(shown + ": vanished since submission", ENOENT);
    }
    return opened.error().with_context(shown);
  }
  return opened;
}

Result<UniqueFd> open_source(const std::string& path, const std::string& shown, stage::SourceKind expected,
                             const std::vector<std::string>& allowed_roots)
{
  auto opened = open_source_as(path, shown, expected, allowed_roots);
  if (!opened) {
    return opened.error();
  }
  return std::move(opened->fd);
}

} // namespace stagehand::cache
