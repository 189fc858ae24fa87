// The one TOML file that configures plugin, daemon and CLI (see README "Configuration").
#pragma once

#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stagehand {

inline constexpr std::string_view k_default_config_path = "/etc/slurm/stagehand.toml";

struct TmpdirConfig
{
  std::string base = "/local/stagehand"; // may hold %n
  bool by_default = false;               // key "default"
  bool export_tmpdir = true;
  std::chrono::seconds keep_for{24 * 3600};
};

enum class Broadcast { automatic, never };

struct StageConfig
{
  std::uint64_t max_bytes = 2ULL << 40;
  std::vector<std::string> allowed_roots;
  Broadcast broadcast = Broadcast::automatic;          // "auto" | "never"
  std::chrono::seconds progress_interval{30};          // 0: no progress lines
  std::chrono::seconds out_budget{60};                 // --stage-out in the epilog (keep well under EpilogTimeout)
};

struct DdpConfig
{
  int port_min = 20000;
  int port_max = 32767;
  std::string master_addr = "{host}";
  std::vector<std::pair<std::string, std::string>> env; // [ddp.env], sorted by name
};

struct DaemonConfig
{
  std::string socket = "/run/stagehand/stagehandd.sock";
  std::string state_dir = "/var/lib/stagehand";
  std::string cache_dir = "/local/stagehand-cache";
  std::uint64_t cache_max_bytes = 500ULL << 30;
  std::uint64_t cache_max_entries = 100000; // each is a manifest and a few inodes; the index holds them all
  std::chrono::seconds gc_interval{300};
  std::string user = "stagehand"; // unprivileged service user that writes the cache
  std::string metrics_file;       // Prometheus text file; empty: none
  bool cache_views = true;        // a hit is shown to the job as its own files (an idmapped overlay)
};

struct Config
{
  TmpdirConfig tmpdir;
  StageConfig stage;
  DdpConfig ddp;
  DaemonConfig daemon;
  std::string source = "(built-in defaults)"; // the file it came from
};

enum class OwnerCheck { require_root_owned, skip };

// Parses TOML text; `source` names the file in error messages ("FILE:LINE: [table] key: reason").
Result<Config> parse_config(std::string_view text, std::string_view source);

// Reads and parses a file. With require_root_owned the file must be a regular file owned by
// root and not writable by group or others (the plugin and the daemon run as root).
Result<Config> load_config(const std::string& path, OwnerCheck check);

// Replaces every "%n" in `pattern` with `node` ("%%" stays a literal '%').
std::string expand_node(std::string_view pattern, std::string_view node);

} // namespace stagehand
