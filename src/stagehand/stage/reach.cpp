// Whom a node's staging of some specs reached (reach.hpp).
#include "stagehand/stage/reach.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/stage/spec.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <vector>

namespace stagehand::stage {

namespace {

constexpr std::string_view k_files = "files";
constexpr std::string_view k_nodes = "nodes ";

// The marker's lines, in order.
std::vector<std::string_view> lines_of(std::string_view text)
{
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  return lines;
}

// The hosts the marker's "nodes" line names, in order.
std::vector<std::string> hosts_in(std::string_view marker)
{
  for (auto line : lines_of(marker)) {
    if (line.starts_with(k_nodes)) {
      auto hosts = ddp::expand_hostlist(line.substr(k_nodes.size()));
      return hosts ? *hosts : std::vector<std::string>{};
    }
  }
  return {};
}

bool one_line(std::string_view s) { return s.find('\n') == std::string_view::npos; }

} // namespace

std::string reach_text(bool files, std::string_view nodes)
{
  std::string text = files ? std::string(k_files) + "\n" : "";
  if (!nodes.empty() && one_line(nodes)) {
    text += std::string(k_nodes) + std::string(nodes) + "\n";
  }
  return text;
}

std::string with_reached(std::string_view marker, std::string_view nodes)
{
  auto hosts = hosts_in(marker);
  std::set<std::string> known(hosts.begin(), hosts.end());
  if (auto more = one_line(nodes) ? ddp::expand_hostlist(nodes) : Result<std::vector<std::string>>(Error::internal(""))) {
    for (auto& h : *more) {
      if (known.insert(h).second) {
        hosts.push_back(std::move(h));
      }
    }
  }
  std::string list;
  for (const auto& h : hosts) {
    list += (list.empty() ? "" : ",") + h;
  }
  return reach_text(has_files(marker), list);
}

bool has_files(std::string_view marker)
{
  const auto lines = lines_of(marker);
  return std::find(lines.begin(), lines.end(), k_files) != lines.end();
}

bool reached(std::string_view marker, std::string_view nodes)
{
  auto wanted = ddp::expand_hostlist(nodes);
  if (nodes.empty() || !wanted || wanted->empty()) {
    return false;
  }
  const auto hosts = hosts_in(marker);
  const std::set<std::string_view> known(hosts.begin(), hosts.end());
  return std::all_of(wanted->begin(), wanted->end(), [&](const std::string& h) { return known.contains(h); });
}

bool owes_step(const StageRequest& request, std::string_view marker)
{
  if (request.bcast == BcastRole::none) {
    return false; // no broadcast in this job: nothing is sent, nobody waits
  }
  const auto specs = parse_stage_option(request.specs);
  for (const auto& name : bcast_names(request.specs, specs ? specs->size() : 0)) {
    struct stat st {};
    if (name != bcast_none_name(request.specs) &&
        ::fstatat(AT_FDCWD, (request.tmpdir + "/" + name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return true; // (a "nothing sent" marker is a few bytes: not worth a helper)
    }
  }
  return request.bcast == BcastRole::reader && has_files(marker) && !request.bcast_nodes.empty() &&
         !reached(marker, request.bcast_nodes);
}

} // namespace stagehand::stage
