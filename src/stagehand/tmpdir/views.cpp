// Cache views: the record's format and the removal of a job's view directory.
#include "stagehand/tmpdir/views.hpp"

#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/stage/summary.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

namespace stagehand::tmpdir {

std::string job_views_name(std::uint32_t job_id) { return "job_" + std::to_string(job_id); }

std::uint32_t job_of_views_name(const std::string& name)
{
  if (!name.starts_with("job_") || name.size() == 4) {
    return 0;
  }
  std::uint32_t id = 0;
  const char* first = name.data() + 4;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, id);
  return ec == std::errc() && end == last && name[4] != '0' ? id : 0;
}

namespace {

bool usable_dest(const std::string& d)
{
  if (d.empty() || d.size() > 4096) {
    return false;
  }
  for (unsigned char c : d) {
    if (c < 0x20 || c == 0x7f) {
      return false;
    }
  }
  return true;
}

} // namespace

Result<std::string> view_line(const View& v)
{
  if (!usable_dest(v.dest)) {
    return Error::refused("view record: unusable destination");
  }
  const std::string read = v.origin == ViewOrigin::read ? ",read=" + std::to_string(v.read_ms) : "";
  return std::to_string(v.files) + " " + std::to_string(v.bytes) + " " + stage::name_of(v.how) + read + " " + v.dest;
}

Result<View> parse_view_line(std::string_view line)
{
  View v;
  auto number = [&](std::uint64_t& out) {
    const auto sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0) {
      return false;
    }
    auto [end, ec] = std::from_chars(line.data(), line.data() + sp, out);
    line.remove_prefix(sp + 1);
    return ec == std::errc() && end == line.data() - 1;
  };
  if (!number(v.files) || !number(v.bytes)) {
    return Error::corrupt("view record: unreadable line");
  }
  const auto sp = line.find(' ');
  if (sp == std::string_view::npos) {
    return Error::corrupt("view record: unreadable line");
  }
  std::string_view how_token = line.substr(0, sp);
  if (const auto comma = how_token.find(','); comma != std::string_view::npos) {
    const std::string_view read = how_token.substr(comma + 1);
    auto [end, ec] = std::from_chars(read.data() + std::min<std::size_t>(5, read.size()), read.data() + read.size(),
                                     v.read_ms);
    if (!read.starts_with("read=") || read.size() == 5 || ec != std::errc() || end != read.data() + read.size()) {
      return Error::corrupt("view record: unreadable line");
    }
    v.origin = ViewOrigin::read;
    how_token = how_token.substr(0, comma);
  }
  auto how = stage::placement_named(how_token);
  if (!how) {
    return Error::corrupt("view record: unreadable line");
  }
  v.how = *how;
  v.dest = std::string(line.substr(sp + 1));
  if (!view_line(v)) {
    return Error::corrupt("view record: unreadable line");
  }
  return v;
}

Result<std::string> format_view_record(const ViewRecord& record)
{
  std::string out;
  for (const auto& v : record.views) {
    auto line = view_line(v);
    if (!line) {
      return line.error();
    }
    out += "view " + *line + "\n";
  }
  if (!record.daemon_silent.empty()) {
    std::string why = record.daemon_silent;
    const auto control = [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; };
    std::replace_if(why.begin(), why.end(), control, '?');
    out += "silent " + why + "\n";
  }
  return out;
}

Result<ViewRecord> parse_view_record(const std::string& text)
{
  ViewRecord record;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto nl = text.find('\n', at);
    if (nl == std::string::npos) {
      return Error::corrupt("view record: the last line is cut");
    }
    const std::string_view line = std::string_view(text).substr(at, nl - at);
    at = nl + 1;
    if (line.starts_with("silent ") && line.size() > 7 && record.daemon_silent.empty() && at == text.size()) {
      record.daemon_silent = line.substr(7);
      continue;
    }
    if (!line.starts_with("view ")) {
      return Error::corrupt("view record: unreadable line");
    }
    auto v = parse_view_line(line.substr(5));
    if (!v) {
      return v.error();
    }
    record.views.push_back(*v);
  }
  return record;
}

std::optional<std::string> view_dest(const stage::StageSpec& spec)
{
  if (spec.src.empty() || spec.src[0] != '/' || spec.unpack == stage::Unpack::never) {
    return std::nullopt;
  }
  std::string dest =
    spec.dest_from == stage::DestFrom::source_name ? stage::strip_archive_suffix(spec.dest) : spec.dest;
  if (dest.empty() || dest.find('/') != std::string::npos || dest == "." || dest == ".." ||
      dest.starts_with(".stagehand")) {
    return std::nullopt;
  }
  return dest;
}

std::string view_summary(const View& v, const std::string& shown, const std::string& tmpdir_path)
{
  if (v.origin == ViewOrigin::read) {
    return stage::summary_line(v.how, shown, tmpdir_path, v.dest, v.files, v.bytes,
                               static_cast<double>(v.read_ms) / 1000.0, "cache miss",
                               "read into the node cache and shown as your own files (cache view)");
  }
  return stage::summary_line(v.how, shown, tmpdir_path, v.dest, v.files, v.bytes, 0, "cache hit",
                             "shown as your own files (cache view)");
}

std::optional<std::vector<std::string>> views_only_summaries(std::string_view specs, const std::vector<View>& views,
                                                             const std::string& tmpdir_path)
{
  auto parsed = stage::parse_stage_option(specs);
  if (!parsed || parsed->empty()) {
    return std::nullopt;
  }
  std::vector<std::string> lines;
  for (const auto& spec : *parsed) {
    const auto dest = view_dest(spec);
    const auto v = !dest ? views.end() : std::find_if(views.begin(), views.end(), [&](const View& x) {
      return x.dest == *dest;
    });
    if (v == views.end()) {
      return std::nullopt;
    }
    lines.push_back(view_summary(*v, spec.src, tmpdir_path));
  }
  return lines;
}

Status remove_job_views(int base_fd, std::uint32_t job_id)
{
  UniqueFd views(::openat(base_fd, k_views_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!views.valid()) {
    return errno == ENOENT ? ok_status() : Error::from_errno(std::string("cannot open ") + k_views_dir);
  }
  auto removed = fs::remove_tree(views.get(), job_views_name(job_id));
  if (!removed && removed.error().code != ENOENT) {
    return removed.error();
  }
  return ok_status();
}

} // namespace stagehand::tmpdir
