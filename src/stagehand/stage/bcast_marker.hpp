// What a read-once broadcast's "done" marker says (broadcast.hpp): the reader's node, and for each
// file source it sent, the identity of the file sbcast read. A node uses a delivered copy only when
// the marker names it, with an identity the source still has and a size the copy has: a copy left
// by an earlier, failed broadcast, or sent before the source was rewritten, is never staged as the
// source (nor cached under the source's identity by the node daemon, which checks it again).
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace stagehand::stage {

// Inode, size, and mtime and ctime in ns: not the device, which differs between the nodes' mounts
// of one shared filesystem.
struct SentIdentity
{
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const SentIdentity&) const = default;
};

SentIdentity identity_of(const struct stat& st);

// One line's form ("INO SIZE MTIME_NS CTIME_NS"), as a marker and the node daemon's request carry it.
std::string identity_text(const SentIdentity& id);
std::optional<SentIdentity> parse_identity(std::string_view text);

// The marker's text: the reader's node, then a line per source it sent.
std::string done_text(const std::string& node, const std::map<std::size_t, SentIdentity>& sent);
// The sources a marker says were sent, by index; none for a text without such lines.
std::map<std::size_t, SentIdentity> sent_in(std::string_view text);

} // namespace stagehand::stage
