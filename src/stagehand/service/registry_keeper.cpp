// The job registry's keeper: loading, the saver thread, and writes in generation order.
#include "stagehand/service/registry_keeper.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>

#include <utility>

namespace stagehand::service {

RegistryKeeper::RegistryKeeper(std::chrono::milliseconds save_every) : m_save_every(save_every) {}

RegistryKeeper::~RegistryKeeper() { stop_saving(); }

void RegistryKeeper::open(int state_dir_fd)
{
  auto loaded = registry::load(state_dir_fd);
  if (!loaded) {
    spdlog::error("registry: {} (starting with an empty one; garbage collection rebuilds it from the disk)",
                  loaded.error().message);
  }
  {
    std::lock_guard lock(m_write_mutex);
    m_state_dir = UniqueFd(::fcntl(state_dir_fd, F_DUPFD_CLOEXEC, 0));
  }
  std::lock_guard lock(m_mutex);
  m_registry = loaded ? std::move(*loaded) : registry::Registry{};
}

void RegistryKeeper::start_saving()
{
  std::lock_guard lock(m_mutex);
  if (!m_saver.joinable()) {
    m_stopping = false;
    // own thread: the daemon's (scripts/thread-starts.sh)
    m_saver = std::thread([this] { save_loop(); });
  }
}

void RegistryKeeper::stop_saving()
{
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
    m_cv.notify_all();
  }
  if (m_saver.joinable()) {
    m_saver.join();
  }
}

void RegistryKeeper::save_loop()
{
  std::unique_lock lock(m_mutex);
  while (!m_stopping) {
    if (!m_dirty) {
      m_cv.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() < m_saved_at + m_save_every) {
      m_cv.wait_until(lock, m_saved_at + m_save_every);
      continue;
    }
    auto copy = copy_locked(); // what changed_locked() left for us
    lock.unlock();
    write(copy);
    lock.lock();
  }
}

void RegistryKeeper::save_now() { write(copy()); }

std::optional<registry::JobRecord> RegistryKeeper::find(std::uint32_t job_id) const
{
  std::lock_guard lock(m_mutex);
  const auto* rec = m_registry.find(job_id);
  return rec ? std::optional(*rec) : std::nullopt;
}

bool RegistryKeeper::key_in_use(const std::string& key) const
{
  std::lock_guard lock(m_mutex);
  return m_registry.key_in_use(key);
}

bool RegistryKeeper::key_viewed(const std::string& key) const
{
  std::lock_guard lock(m_mutex);
  return m_registry.key_viewed(key);
}

void RegistryKeeper::add_cache_key(std::uint32_t job_id, const std::string& key, registry::Registry::KeyUse use)
{
  change(
    [&](registry::Registry& reg) {
      reg.add_cache_key(job_id, key, use);
      return Changed::yes;
    },
    Save::soon);
}

RegistryKeeper::Copy RegistryKeeper::copy()
{
  std::lock_guard lock(m_mutex);
  return copy_locked();
}

void RegistryKeeper::changed_locked()
{
  if (!std::exchange(m_dirty, true)) {
    m_cv.notify_all();
  }
}

RegistryKeeper::Copy RegistryKeeper::copy_locked()
{
  m_saved_at = std::chrono::steady_clock::now();
  m_dirty = false;
  return Copy{++m_generation, m_registry};
}

void RegistryKeeper::write(const Copy& copy)
{
  {
    std::lock_guard lock(m_write_mutex);
    if (!m_state_dir.valid() || copy.generation <= m_written) {
      return; // not opened, or a later copy is on disk already
    }
    m_written = copy.generation;
    auto st = registry::save(m_state_dir.get(), copy.registry);
    if (st) {
      if (std::exchange(m_failing, false)) {
        spdlog::info("registry: written again");
      }
      return;
    }
    // Once per failing spell (a full disk would say it every second), then tried again.
    if (!std::exchange(m_failing, true)) {
      spdlog::error("registry: {} (tried again every {} ms until it is written)", st.error().message,
                    m_save_every.count());
    }
  }
  // What is on disk is older than the registry: the saver writes it again, as after a change.
  std::lock_guard lock(m_mutex);
  changed_locked();
}

} // namespace stagehand::service
