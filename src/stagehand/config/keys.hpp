// The keys stagehand.toml may hold: the one list the parser, the docs test and check-config share.
#pragma once

#include <array>
#include <string_view>

namespace stagehand {

// A key of a table; table "" is the top level, whose keys are the tables themselves. [ddp.env]
// is the key "env" of [ddp] (its own keys are free-form variable names).
struct ConfigKey
{
  std::string_view table;
  std::string_view key;
};

// Every key the loader accepts. The parser refuses any key not listed here and fails loudly on a
// listed key it has no handler for, so this list cannot drift from what parse_config() reads;
// tests/unit/config_keys_test.cpp checks it against stagehand.toml(5) and conf/stagehand.toml.
inline constexpr std::array k_config_keys = {
  ConfigKey{"", "tmpdir"},
  ConfigKey{"", "stage"},
  ConfigKey{"", "ddp"},
  ConfigKey{"", "daemon"},
  ConfigKey{"tmpdir", "base"},
  ConfigKey{"tmpdir", "default"},
  ConfigKey{"tmpdir", "export_tmpdir"},
  ConfigKey{"tmpdir", "keep_for"},
  ConfigKey{"stage", "max_bytes"},
  ConfigKey{"stage", "allowed_roots"},
  ConfigKey{"stage", "broadcast"},
  ConfigKey{"stage", "progress_interval"},
  ConfigKey{"stage", "out_budget"},
  ConfigKey{"ddp", "port_min"},
  ConfigKey{"ddp", "port_max"},
  ConfigKey{"ddp", "master_addr"},
  ConfigKey{"ddp", "env"},
  ConfigKey{"daemon", "socket"},
  ConfigKey{"daemon", "state_dir"},
  ConfigKey{"daemon", "cache_dir"},
  ConfigKey{"daemon", "cache_max_bytes"},
  ConfigKey{"daemon", "cache_max_entries"},
  ConfigKey{"daemon", "gc_interval"},
  ConfigKey{"daemon", "user"},
  ConfigKey{"daemon", "metrics_file"},
  ConfigKey{"daemon", "cache_views"},
};

constexpr bool is_config_key(std::string_view table, std::string_view key)
{
  for (const auto& k : k_config_keys) {
    if (k.table == table && k.key == key) {
      return true;
    }
  }
  return false;
}

} // namespace stagehand
