// What a read-once broadcast's "done" marker says (bcast_marker.hpp).
#include "stagehand/stage/bcast_marker.hpp"

#include <charconv>

namespace stagehand::stage {

namespace {

constexpr std::string_view k_source = "source ";

std::int64_t ns(const struct timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

// The next space-separated number of `text` into `out`; false when there is none.
template<typename T> bool next_number(std::string_view& text, T& out)
{
  while (!text.empty() && text.front() == ' ') {
    text.remove_prefix(1);
  }
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc() || end == text.data()) {
    return false;
  }
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return true;
}

} // namespace

SentIdentity identity_of(const struct stat& st)
{
  return SentIdentity{static_cast<std::uint64_t>(st.st_ino), static_cast<std::uint64_t>(st.st_size), ns(st.st_mtim),
                      ns(st.st_ctim)};
}

std::string identity_text(const SentIdentity& id)
{
  return std::to_string(id.ino) + " " + std::to_string(id.size) + " " + std::to_string(id.mtime_ns) + " " +
         std::to_string(id.ctime_ns);
}

std::optional<SentIdentity> parse_identity(std::string_view text)
{
  SentIdentity id;
  if (!next_number(text, id.ino) || !next_number(text, id.size) || !next_number(text, id.mtime_ns) ||
      !next_number(text, id.ctime_ns) || !text.empty()) {
    return std::nullopt;
  }
  return id;
}

std::string done_text(const std::string& node, const std::map<std::size_t, SentIdentity>& sent)
{
  std::string text = node + "\n";
  for (const auto& [index, id] : sent) {
    text += std::string(k_source) + std::to_string(index) + " " + identity_text(id) + "\n";
  }
  return text;
}

std::map<std::size_t, SentIdentity> sent_in(std::string_view text)
{
  std::map<std::size_t, SentIdentity> sent;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.starts_with(k_source)) {
      continue;
    }
    line.remove_prefix(k_source.size());
    std::size_t index = 0;
    if (!next_number(line, index)) {
      continue;
    }
    if (auto id = parse_identity(line)) {
      sent[index] = *id;
    }
  }
  return sent;
}

} // namespace stagehand::stage
