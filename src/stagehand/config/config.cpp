// Config parsing: every unknown key, wrong type and bad value is an error naming file, line, key.
#include "stagehand/config/config.hpp"
#include "stagehand/config/text_check.hpp"

#include "stagehand/config/keys.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/units.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <toml++/toml.h>

#include <functional>
#include <map>

namespace stagehand {

namespace {

class Parser
{
public:
  explicit Parser(std::string_view source) : m_source(source) {}

  Error error_at(const toml::node& node, std::string_view table, std::string_view key,
                 const std::string& reason) const
  {
    std::string where = m_source;
    if (node.source().begin.line > 0) {
      where += ":" + std::to_string(node.source().begin.line);
    }
    std::string name = table.empty() ? std::string(key) : "[" + std::string(table) + "] " + std::string(key);
    return Error::config(where + ": " + name + ": " + reason);
  }

  template<typename T>
  Result<T> get(const toml::node& node, std::string_view table, std::string_view key) const
  {
    if (auto v = node.value_exact<T>()) {
      return *v;
    }
    return error_at(node, table, key, std::string("expected ") + type_name<T>() + ", got " +
                                        std::string(toml::impl::node_type_friendly_names[static_cast<int>(node.type())]));
  }

  Result<std::uint64_t> size(const toml::node& node, std::string_view table, std::string_view key) const
  {
    if (auto i = node.value_exact<std::int64_t>()) {
      if (*i < 0) {
        return error_at(node, table, key, "size must not be negative");
      }
      return static_cast<std::uint64_t>(*i);
    }
    auto s = get<std::string>(node, table, key);
    if (!s) {
      return error_at(node, table, key, "expected a size like \"500G\"");
    }
    auto v = parse_size(*s);
    if (!v) {
      return error_at(node, table, key, v.error().message);
    }
    return *v;
  }

  Result<std::chrono::seconds> duration(const toml::node& node, std::string_view table,
                                        std::string_view key) const
  {
    if (auto i = node.value_exact<std::int64_t>()) {
      if (*i < 0) {
        return error_at(node, table, key, "duration must not be negative");
      }
      return std::min(std::chrono::seconds(*i), k_max_duration); // longer counts as the longest
    }
    auto s = get<std::string>(node, table, key);
    if (!s) {
      return error_at(node, table, key, "expected a duration like \"24h\"");
    }
    auto v = parse_duration(*s);
    if (!v) {
      return error_at(node, table, key, v.error().message);
    }
    return *v;
  }

  Result<std::string> absolute_path(const toml::node& node, std::string_view table,
                                    std::string_view key) const
  {
    auto s = get<std::string>(node, table, key);
    if (!s) {
      return s.error();
    }
    if (s->empty() || s->front() != '/') {
      return error_at(node, table, key, "\"" + *s + "\" is not an absolute path");
    }
    if (s->find('\0') != std::string::npos) {
      return error_at(node, table, key, "path contains a NUL byte");
    }
    return *s;
  }

private:
  template<typename T> static const char* type_name()
  {
    if constexpr (std::is_same_v<T, std::string>) {
      return "a string";
    } else if constexpr (std::is_same_v<T, bool>) {
      return "true or false";
    } else {
      return "an integer";
    }
  }

  std::string m_source;
};

using KeyHandler = std::function<Status(const toml::node&)>;

// Walks one table, dispatching each key to its handler; keys not in k_config_keys are errors.
// Handlers and k_config_keys must agree exactly (a bug otherwise, reported as one).
Status walk_table(const Parser& p, const toml::table& tbl, std::string_view table_name,
                  const std::map<std::string, KeyHandler, std::less<>>& handlers)
{
  for (const auto& [key, handler] : handlers) {
    if (!is_config_key(table_name, key)) {
      return Error::internal("config: [" + std::string(table_name) + "] " + key + " is read but not in k_config_keys");
    }
  }
  for (auto&& [key, node] : tbl) {
    if (!is_config_key(table_name, key.str())) {
      return p.error_at(node, table_name, key.str(), "unknown key");
    }
    auto it = handlers.find(key.str());
    if (it == handlers.end()) {
      return Error::internal("config: [" + std::string(table_name) + "] " + std::string(key.str()) +
                             " is in k_config_keys but not read");
    }
    auto st = it->second(node);
    if (!st) {
      return st.error();
    }
  }
  return ok_status();
}

template<typename T, typename F> KeyHandler assign(F&& getter, T& target)
{
  return [getter = std::forward<F>(getter), &target](const toml::node& node) -> Status {
    auto v = getter(node);
    if (!v) {
      return v.error();
    }
    target = std::move(*v);
    return ok_status();
  };
}

bool valid_env_name(std::string_view name)
{
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
    return false;
  }
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) {
      return false;
    }
  }
  return true;
}

Status parse_tmpdir(const Parser& p, const toml::node& node, TmpdirConfig& c)
{
  const auto* tbl = node.as_table();
  if (!tbl) {
    return p.error_at(node, "", "tmpdir", "expected a table");
  }
  const std::string_view t = "tmpdir";
  return walk_table(
    p, *tbl, t,
    {
      {"base", assign([&](auto& n) { return p.absolute_path(n, t, "base"); }, c.base)},
      {"default", assign([&](auto& n) { return p.get<bool>(n, t, "default"); }, c.by_default)},
      {"export_tmpdir", assign([&](auto& n) { return p.get<bool>(n, t, "export_tmpdir"); }, c.export_tmpdir)},
      {"keep_for", assign([&](auto& n) { return p.duration(n, t, "keep_for"); }, c.keep_for)},
    });
}

Status parse_stage(const Parser& p, const toml::node& node, StageConfig& c)
{
  const auto* tbl = node.as_table();
  if (!tbl) {
    return p.error_at(node, "", "stage", "expected a table");
  }
  const std::string_view t = "stage";
  auto roots = [&](const toml::node& n) -> Status {
    const auto* arr = n.as_array();
    if (!arr) {
      return p.error_at(n, t, "allowed_roots", "expected an array of absolute paths");
    }
    c.allowed_roots.clear();
    for (const auto& item : *arr) {
      auto path = p.absolute_path(item, t, "allowed_roots");
      if (!path) {
        return path.error();
      }
      c.allowed_roots.push_back(*path);
    }
    return ok_status();
  };
  return walk_table(p, *tbl, t,
                    {
                      {"max_bytes", assign([&](auto& n) { return p.size(n, t, "max_bytes"); }, c.max_bytes)},
                      {"allowed_roots", roots},
                      {"broadcast",
                       [&](const toml::node& n) -> Status {
                         auto v = p.get<std::string>(n, t, "broadcast");
                         if (!v) {
                           return v.error();
                         }
                         if (*v != "auto" && *v != "never") {
                           return p.error_at(n, t, "broadcast", "\"" + *v + "\" is not \"auto\" or \"never\"");
                         }
                         c.broadcast = *v == "auto" ? Broadcast::automatic : Broadcast::never;
                         return ok_status();
                       }},
                      {"progress_interval",
                       assign([&](auto& n) { return p.duration(n, t, "progress_interval"); }, c.progress_interval)},
                      {"out_budget", assign([&](auto& n) { return p.duration(n, t, "out_budget"); }, c.out_budget)},
                    });
}

Status parse_ddp(const Parser& p, const toml::node& node, DdpConfig& c)
{
  const auto* tbl = node.as_table();
  if (!tbl) {
    return p.error_at(node, "", "ddp", "expected a table");
  }
  const std::string_view t = "ddp";
  auto port = [&](std::string_view key, int& target) -> KeyHandler {
    return [&, key](const toml::node& n) -> Status {
      auto v = p.get<std::int64_t>(n, t, key);
      if (!v) {
        return v.error();
      }
      if (*v < 1 || *v > 65535) {
        return p.error_at(n, t, key, std::to_string(*v) + " is not a port number (1-65535)");
      }
      target = static_cast<int>(*v);
      return ok_status();
    };
  };
  auto env = [&](const toml::node& n) -> Status {
    const auto* env_tbl = n.as_table();
    if (!env_tbl) {
      return p.error_at(n, t, "env", "expected a table of NAME = \"value\"");
    }
    c.env.clear();
    for (auto&& [key, value] : *env_tbl) {
      if (!valid_env_name(key.str())) {
        return p.error_at(value, "ddp.env", key.str(), "not a valid environment variable name");
      }
      auto s = p.get<std::string>(value, "ddp.env", key.str());
      if (!s) {
        return s.error();
      }
      c.env.emplace_back(std::string(key.str()), *s);
    }
    return ok_status();
  };
  auto st = walk_table(p, *tbl, t,
                       {
                         {"port_min", port("port_min", c.port_min)},
                         {"port_max", port("port_max", c.port_max)},
                         {"master_addr", assign([&](auto& n) { return p.get<std::string>(n, t, "master_addr"); },
                                                c.master_addr)},
                         {"env", env},
                       });
  if (!st) {
    return st;
  }
  // Checks across keys point at the key's own line (the table's when the key is a default).
  auto line_of = [&](std::string_view key) -> const toml::node& {
    const toml::node* n = tbl->get(key);
    return n ? *n : node;
  };
  if (c.port_min > c.port_max) {
    return p.error_at(line_of("port_min"), t, "port_min", "port_min " + std::to_string(c.port_min) +
                                                            " is above port_max " + std::to_string(c.port_max));
  }
  if (c.master_addr.find("{host}") == std::string::npos) {
    return p.error_at(line_of("master_addr"), t, "master_addr",
                      "template \"" + c.master_addr + "\" does not contain {host}");
  }
  return ok_status();
}

Status parse_daemon(const Parser& p, const toml::node& node, DaemonConfig& c)
{
  const auto* tbl = node.as_table();
  if (!tbl) {
    return p.error_at(node, "", "daemon", "expected a table");
  }
  const std::string_view t = "daemon";
  return walk_table(
    p, *tbl, t,
    {
      {"socket", assign([&](auto& n) { return p.absolute_path(n, t, "socket"); }, c.socket)},
      {"state_dir", assign([&](auto& n) { return p.absolute_path(n, t, "state_dir"); }, c.state_dir)},
      {"cache_dir", assign([&](auto& n) { return p.absolute_path(n, t, "cache_dir"); }, c.cache_dir)},
      {"cache_max_bytes", assign([&](auto& n) { return p.size(n, t, "cache_max_bytes"); }, c.cache_max_bytes)},
      {"cache_max_entries",
       [&](const toml::node& n) -> Status {
         auto v = p.get<std::int64_t>(n, t, "cache_max_entries");
         if (!v) {
           return v.error();
         }
         if (*v < 1) {
           return p.error_at(n, t, "cache_max_entries", std::to_string(*v) + " is not a number of entries (1 or more)");
         }
         c.cache_max_entries = static_cast<std::uint64_t>(*v);
         return ok_status();
       }},
      {"gc_interval",
       [&](const toml::node& n) -> Status {
         auto v = p.duration(n, t, "gc_interval");
         if (!v) {
           return v.error();
         }
         // 0 would collect without a pause, asking slurmctld each time: 1 s at least.
         c.gc_interval = std::max(*v, std::chrono::seconds(1));
         return ok_status();
       }},
      {"cache_views", assign([&](auto& n) { return p.get<bool>(n, t, "cache_views"); }, c.cache_views)},
      {"user",
       [&](const toml::node& n) -> Status {
         auto v = p.get<std::string>(n, t, "user");
         if (!v) {
           return v.error();
         }
         if (v->empty() || v->size() > 32 || v->find_first_of("/:\n ") != std::string::npos || *v == "root") {
           return p.error_at(n, t, "user", "\"" + *v + "\" is not a usable service user name (and never root)");
         }
         c.user = *v;
         return ok_status();
       }},
      {"metrics_file",
       [&](const toml::node& n) -> Status {
         auto v = p.get<std::string>(n, t, "metrics_file");
         if (!v) {
           return v.error();
         }
         if (!v->empty()) {
           auto path = p.absolute_path(n, t, "metrics_file");
           if (!path) {
             return path.error();
           }
         }
         c.metrics_file = *v;
         return ok_status();
       }},
    });
}

} // namespace

Result<Config> parse_config(std::string_view text, std::string_view source)
{
  if (auto at = unsafe_non_ascii(text)) { // never hand toml++ 3.3 what it mishandles (text_check.hpp)
    return Error::config(std::string(source) + ":" + std::to_string(at->line) + ":" + std::to_string(at->column) +
                         ": a non-ASCII character (allowed only in whole-line # comments)");
  }
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Error::config(std::string(source) + ":" + std::to_string(e.source().begin.line) + ": " +
                          std::string(e.description()));
  }
  Parser p(source);
  Config config;
  config.source = std::string(source);
  auto st = walk_table(p, root, "",
                       {
                         {"tmpdir", [&](auto& n) { return parse_tmpdir(p, n, config.tmpdir); }},
                         {"stage", [&](auto& n) { return parse_stage(p, n, config.stage); }},
                         {"ddp", [&](auto& n) { return parse_ddp(p, n, config.ddp); }},
                         {"daemon", [&](auto& n) { return parse_daemon(p, n, config.daemon); }},
                       });
  if (!st) {
    return st.error();
  }
  return config;
}

Result<Config> load_config(const std::string& path, OwnerCheck check)
{
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW));
  if (!fd.valid()) {
    return Error::from_errno("config " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return Error::from_errno("config " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    return Error::config("config " + path + ": not a regular file");
  }
  if (check == OwnerCheck::require_root_owned) {
    if (st.st_uid != 0) {
      return Error{ErrorKind::config, EPERM, "config " + path + ": refused: owned by uid " + std::to_string(st.st_uid) +
                            ", must be owned by root"};
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return Error{ErrorKind::config, EPERM, "config " + path + ": refused: writable by group or others (chmod go-w)"};
    }
  }
  auto text = fs::read_all(fd.get(), "config " + path, 1U << 20);
  if (!text) {
    if (text.error().kind == ErrorKind::limit) {
      return Error::config("config " + path + ": larger than 1 MiB");
    }
    return text.error();
  }
  return parse_config(*text, path);
}

std::string expand_node(std::string_view pattern, std::string_view node)
{
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (pattern[i + 1] == 'n') {
        out += node;
        ++i;
        continue;
      }
      if (pattern[i + 1] == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

} // namespace stagehand
