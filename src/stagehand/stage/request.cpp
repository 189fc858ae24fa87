// StageRequest <-> stage-run arguments, and the marker names.
#include "stagehand/stage/request.hpp"

#include "stagehand/util/hash.hpp"
#include "stagehand/util/units.hpp"

#include <sys/resource.h>

#include <cerrno>

namespace stagehand::stage {

namespace {

std::string specs_hash(std::string_view specs) { return to_hex(fnv1a<std::uint64_t>(specs), 16); }

} // namespace

std::string done_marker(std::string_view specs) { return "done-" + specs_hash(specs); }

std::string failed_marker(std::string_view specs) { return "failed-" + specs_hash(specs); }

std::string bcast_copy_name(std::string_view specs, std::size_t index)
{
  return ".stagehand-bcast-" + specs_hash(specs) + "-" + std::to_string(index);
}

std::string bcast_done_name(std::string_view specs) { return ".stagehand-bcast-" + specs_hash(specs) + ".done"; }

std::string bcast_failed_name(std::string_view specs) { return ".stagehand-bcast-" + specs_hash(specs) + ".failed"; }

std::string bcast_none_name(std::string_view specs) { return ".stagehand-bcast-" + specs_hash(specs) + ".none"; }

std::string settle_lock_name(std::string_view specs) { return "settle-" + specs_hash(specs); }

std::vector<std::string> bcast_names(std::string_view specs, std::size_t sources)
{
  std::vector<std::string> names;
  for (std::size_t i = 0; i < sources; ++i) {
    names.push_back(bcast_copy_name(specs, i));
  }
  names.push_back(bcast_done_name(specs));
  names.push_back(bcast_failed_name(specs));
  names.push_back(bcast_none_name(specs));
  return names;
}

std::vector<std::string> request_args(const StageRequest& r)
{
  std::vector<std::string> args = {"--tmpdir", r.tmpdir, "--node", r.node, "--max-bytes", std::to_string(r.max_bytes)};
  if (!r.base.empty()) {
    args.insert(args.end(), {"--base", r.base});
  }
  for (const auto& root : r.allowed_roots) {
    args.insert(args.end(), {"--allowed-root", root});
  }
  if (!r.socket.empty()) {
    args.insert(args.end(), {"--job", std::to_string(r.job_id), "--socket", r.socket});
    if (!r.daemon_silent.empty()) {
      args.insert(args.end(), {"--daemon-silent", r.daemon_silent});
    }
  }
  args.insert(args.end(), {"--progress-interval", std::to_string(r.progress_interval)});
  for (const auto& v : r.views) {
    args.insert(args.end(), {"--view", v});
  }
  switch (r.bcast) {
  case BcastRole::none:
    break;
  case BcastRole::reader:
    args.insert(args.end(), {"--bcast", "reader:" + r.bcast_scope});
    break;
  case BcastRole::receiver:
    args.insert(args.end(), {"--bcast", "receiver"});
    break;
  case BcastRole::delivered:
    args.insert(args.end(), {"--bcast", "delivered"});
    break;
  }
  if (r.bcast != BcastRole::none && !r.bcast_nodes.empty()) {
    args.insert(args.end(), {"--bcast-nodes", r.bcast_nodes});
  }
  args.insert(args.end(), {"--", r.specs});
  return args;
}

Result<StageRequest> parse_request_args(const std::vector<std::string>& args)
{
  StageRequest r;
  bool have_specs = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--" && i + 2 == args.size() && !have_specs) {
      r.specs = args[++i];
      have_specs = true;
    } else if (a == "--tmpdir" && has_value) {
      r.tmpdir = args[++i];
    } else if (a == "--node" && has_value) {
      r.node = args[++i];
    } else if (a == "--base" && has_value) {
      r.base = args[++i];
    } else if (a == "--max-bytes" && has_value) {
      auto size = parse_size(args[++i]);
      if (!size) {
        return size.error();
      }
      r.max_bytes = *size;
    } else if (a == "--allowed-root" && has_value) {
      r.allowed_roots.push_back(args[++i]);
    } else if (a == "--socket" && has_value) {
      r.socket = args[++i];
    } else if (a == "--daemon-silent" && has_value) {
      r.daemon_silent = args[++i];
    } else if (a == "--bcast-nodes" && has_value) {
      r.bcast_nodes = args[++i];
    } else if (a == "--view" && has_value) {
      r.views.push_back(args[++i]);
    } else if ((a == "--job" || a == "--progress-interval") && has_value) {
      auto n = parse_u32(args[++i]);
      if (!n) {
        return Error::refused(a + " needs a number, got \"" + args[i] + "\"");
      }
      (a == "--job" ? r.job_id : r.progress_interval) = *n;
    } else if (a == "--bcast" && has_value) {
      const std::string v = args[++i];
      if (v == "receiver") {
        r.bcast = BcastRole::receiver;
      } else if (v == "delivered") {
        r.bcast = BcastRole::delivered;
      } else if (v.starts_with("reader:") && v.size() > 7 &&
                 v.find_first_not_of("0123456789.", 7) == std::string::npos) {
        r.bcast = BcastRole::reader;
        r.bcast_scope = v.substr(7);
      } else {
        return Error::refused("--bcast needs reader:JOB[.STEP], receiver or delivered, got \"" + v + "\"");
      }
    } else if (!have_specs && !a.starts_with("--")) {
      r.specs = a;
      have_specs = true;
    } else {
      return Error::refused("unexpected argument \"" + a + "\"");
    }
  }
  if (r.tmpdir.empty() || r.specs.empty()) {
    return Error::refused("--tmpdir and SPECS are required");
  }
  return r;
}

int set_helper_limits()
{
  struct rlimit nofile {};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) {
    return errno;
  }
  nofile.rlim_cur = nofile.rlim_max == RLIM_INFINITY || nofile.rlim_max > k_helper_open_files ? k_helper_open_files
                                                                                               : nofile.rlim_max;
  const struct rlimit no_core {0, 0};
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0 || ::setrlimit(RLIMIT_CORE, &no_core) != 0) {
    return errno;
  }
  return 0;
}

} // namespace stagehand::stage
