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

// Size, and mtime and ctime in ns: what every node's client of one shared filesystem reports alike.
// Not the device or the inode, which a client may make up for itself (a FUSE filesystem without
// its own inode numbers, CIFS with noserverino, mixed 32- and 64-bit inode settings); a file
// replaced by another (a rename over it) has another ctime.
struct SentIdentity
{
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const SentIdentity&) const = default;
};

SentIdentity identity_of(const struct stat& st);

// Whether the source as a node sees it `now` is still the file the reader sent: the same size, and
// the same times at the coarser resolution of the two (a client that keeps whole seconds or
// microseconds beside one that keeps nanoseconds).
bool same_source(const SentIdentity& sent, const SentIdentity& now);

// One line's form ("SIZE MTIME_NS CTIME_NS"), as a marker and the node daemon's request carry it.
std::string identity_text(const SentIdentity& id);
std::optional<SentIdentity> parse_identity(std::string_view text);

// The marker's text: the reader's node, then a line per source it sent.
std::string done_text(const std::string& node, const std::map<std::size_t, SentIdentity>& sent);
// The sources a marker says were sent, by index; none for a text without such lines.
std::map<std::size_t, SentIdentity> sent_in(std::string_view text);

} // namespace stagehand::stage
