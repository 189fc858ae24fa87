// Whom a node's staging of some specs reached (reach.hpp).
#include "stagehand/stage/reach.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/stage/spec.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

namespace stagehand::stage {

namespace {

constexpr std::string_view k_prefix = "nodes ";

} // namespace

std::string reach_line(std::string_view nodes)
{
  if (nodes.empty() || nodes.find('\n') != std::string_view::npos) {
    return "";
  }
  return std::string(k_prefix) + std::string(nodes) + "\n";
}

bool reached(std::string_view marker, std::string_view nodes)
{
  auto wanted = ddp::expand_hostlist(nodes);
  if (nodes.empty() || !wanted || wanted->empty()) {
    return false;
  }
  std::set<std::string> known;
  while (!marker.empty()) {
    const auto nl = marker.find('\n');
    const auto line = marker.substr(0, nl);
    marker = nl == std::string_view::npos ? std::string_view() : marker.substr(nl + 1);
    if (!line.starts_with(k_prefix)) {
      continue;
    }
    if (auto hosts = ddp::expand_hostlist(line.substr(k_prefix.size()))) {
      known.insert(hosts->begin(), hosts->end());
    }
  }
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
    if (::fstatat(AT_FDCWD, (request.tmpdir + "/" + name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return true;
    }
  }
  return request.bcast == BcastRole::reader && !reached(marker, request.bcast_nodes);
}

} // namespace stagehand::stage
