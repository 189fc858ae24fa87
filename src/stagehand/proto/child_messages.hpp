// What stagehandd's children say to it: one message each when they end, typed, over the
// protocol's JSON helpers (never-throwing field access, json_fields.hpp). A child that fails says
// {"ok":false,"kind":...,"code":...,"error":...}; one that succeeds {"ok":true,...} with the fields
// of its message. The parent reads what a child says as it would a reply: a field missing or of the
// wrong type is an error naming it (a user-side child runs with the job user's uid).
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>

namespace stagehand::proto {

// The user side opened a source and identified it (the descriptors travel beside the message).
struct SourceIdentified
{
  std::string key;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::int64_t newest_ns = 0;
  bool archive = false; // a file whose content is an archive it unpacks
  bool zip = false;     // that archive is a zip (read whole before it is unpacked)
  bool dir = false;     // a directory (else a regular file)
  bool operator==(const SourceIdentified&) const = default;
};

// The user side streamed a directory as a tar: its identity as walked, whether anything changed
// while it was read, and, when it also copied the tree into the job's directory, what the copy
// holds and why the stream stopped before its end ("" when it did not).
struct TreeStreamed
{
  std::string key;
  bool changed = false;
  std::int64_t newest_ns = 0;
  std::string dropped;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  stage::CreatedName created{}; // with a copy into the job's directory: what that copy created
  bool operator==(const TreeStreamed&) const = default;
};

// The service side read a source once, to the job and to the spool; `dropped` says why the spool
// was given up ("" = it holds the whole source).
struct Teed
{
  std::uint64_t bytes = 0;
  std::string dropped;
  bool operator==(const Teed&) const = default;
};

// A delivery into the job's directory, or a fill of the cache, placed a source: stage::Placed.

std::string child_message(const SourceIdentified& m);
std::string child_message(const TreeStreamed& m);
std::string child_message(const Teed& m);
std::string child_message(const stage::Placed& m);
// A failure, its kind, errno and sentence kept (control characters and bad UTF-8 replaced).
std::string child_failure(const Error& e);

// What a child said: its message, or the error it reported, or an error saying what was wrong
// with what it sent.
template<typename T> Result<T> parse_child_message(const std::string& text);

} // namespace stagehand::proto
