// What stagehandd's pieces share on a node.
#include "stagehand/service/node.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

namespace stagehand::service {

Node::Node(std::string node_name, Config initial, std::function<void()> removal_set_aside)
  : name(std::move(node_name)),
    base_path(tmpdir::base_path(initial, name).value_or("")),
    keeper(std::move(removal_set_aside), [this](const std::string& key) { return registry.key_in_use(key); },
           [this](const std::string& key) { return registry.key_viewed(key); }),
    config(std::move(initial))
{
  keeper.set_limits(cache::CacheLimits{config.daemon.cache_max_bytes, config.daemon.cache_max_entries});
}

Config Node::config_now()
{
  std::lock_guard lock(mutex);
  return config;
}

Result<UniqueFd> Node::open_base() const
{
  if (base_path.empty()) {
    return Error::config("[tmpdir] base: unusable for node " + name);
  }
  return fs::open_trusted_dir(base_path, fs::CreateMissing::yes);
}

} // namespace stagehand::service
