#include "stagehand/stage/kinds.hpp"

namespace stagehand::stage {

const char* name_of(SourceKind k) { return k == SourceKind::dir ? "dir" : "file"; }
const char* name_of(Unpack u) { return u == Unpack::never ? "never" : "auto"; }
const char* name_of(Placement p) { return p == Placement::unpacked ? "unpacked" : "copied"; }

std::optional<SourceKind> source_kind_named(std::string_view word)
{
  if (word == "file") {
    return SourceKind::file;
  }
  if (word == "dir") {
    return SourceKind::dir;
  }
  return std::nullopt;
}

std::optional<Unpack> unpack_named(std::string_view word)
{
  if (word == "auto") {
    return Unpack::if_archive;
  }
  if (word == "never") {
    return Unpack::never;
  }
  return std::nullopt;
}

std::optional<Placement> placement_named(std::string_view word)
{
  if (word == "copied") {
    return Placement::copied;
  }
  if (word == "unpacked") {
    return Placement::unpacked;
  }
  return std::nullopt;
}

} // namespace stagehand::stage
