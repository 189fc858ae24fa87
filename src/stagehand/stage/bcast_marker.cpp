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

// The step of the coarsest resolution either time shows (1 s, 1 µs or 1 ns).
std::int64_t resolution(std::int64_t a, std::int64_t b)
{
  for (std::int64_t step : {1000000000LL, 1000LL}) {
    if (a % step == 0 || b % step == 0) {
      return step;
    }
  }
  return 1;
}

bool same_time(std::int64_t a, std::int64_t b)
{
  const auto step = resolution(a, b);
  const auto floor_div = [step](std::int64_t t) { return t / step - (t % step < 0 ? 1 : 0); };
  return floor_div(a) == floor_div(b);
}

} // namespace

SentIdentity identity_of(const struct stat& st)
{
  return SentIdentity{static_cast<std::uint64_t>(st.st_size), ns(st.st_mtim), ns(st.st_ctim)};
}

bool same_source(const SentIdentity& sent, const SentIdentity& now)
{
  return sent.size == now.size && same_time(sent.mtime_ns, now.mtime_ns) && same_time(sent.ctime_ns, now.ctime_ns);
}

std::string identity_text(const SentIdentity& id)
{
  return std::to_string(id.size) + " " + std::to_string(id.mtime_ns) + " " + std::to_string(id.ctime_ns);
}

std::optional<SentIdentity> parse_identity(std::string_view text)
{
  SentIdentity id;
  if (!next_number(text, id.size) || !next_number(text, id.mtime_ns) || !next_number(text, id.ctime_ns) ||
      !text.empty()) {
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
