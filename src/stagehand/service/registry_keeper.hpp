// The daemon's job registry (registry::Registry) with its persistence, under the keeper's own
// lock: who owns each job directory, which cache entries running jobs pin, what each job staged.
// A write that fails (a full or read-only state disk) is tried again by the saver thread a second
// later, as a change would be, until one succeeds.
// A change is written soon, by the keeper's saver thread at most once per second (a job staging
// thousands of sources changes its record thousands of times; a crash loses at most that second,
// which GC and the adoption of jobs rebuild), or now, before the caller answers (a job's start and
// end). A write serialises a copy taken under the lock, after the lock, and never puts an older
// copy on disk after a newer one.
//
// Lock order: a caller may hold its own locks (the node's mutex, Node::mutex; the cache keeper's)
// when it calls the keeper; the keeper never takes another lock while it holds its own. A function given to read()
// or change() runs under the keeper's lock: it takes no lock and calls no keeper method.
#pragma once

#include "stagehand/registry/registry.hpp"
#include "stagehand/util/fd.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace stagehand::service {

class RegistryKeeper
{
public:
  // What a function given to change() did to the registry.
  enum class Changed { no, yes };
  // When a change reaches the disk: soon (the saver thread), or now (before change() returns).
  enum class Save { soon, now };

  // A registry written (by the saver thread) at most once per `save_every`.
  explicit RegistryKeeper(std::chrono::milliseconds save_every = k_save_every);
  ~RegistryKeeper();
  RegistryKeeper(const RegistryKeeper&) = delete;
  RegistryKeeper& operator=(const RegistryKeeper&) = delete;

  // Loads the registry persisted in `state_dir_fd` (a copy of the descriptor is kept to write it
  // there); one that cannot be read is logged and replaced by an empty one.
  void open(int state_dir_fd);
  // Starts the saver thread; stop_saving() ends it (the destructor too). Without it nothing is
  // written but by change(..., Save::now) and save_now().
  void start_saving();
  void stop_saving();
  // Writes the registry now, whatever the saver thread does (at shutdown). Nothing before open().
  void save_now();

  // fn(const registry::Registry&) under the lock; its result.
  template<typename F> auto read(F&& fn) const
  {
    std::lock_guard lock(m_mutex);
    return fn(static_cast<const registry::Registry&>(m_registry));
  }
  // fn(registry::Registry&) under the lock; what it says it changed is saved as `save` says.
  template<typename F> void change(F&& fn, Save save)
  {
    std::unique_lock lock(m_mutex);
    if (fn(m_registry) == Changed::no) {
      return;
    }
    if (save == Save::soon) {
      changed_locked();
      return;
    }
    auto copy = copy_locked();
    lock.unlock();
    write(copy);
  }

  // One-step reads and changes, each under the lock.
  std::optional<registry::JobRecord> find(std::uint32_t job_id) const;
  bool key_in_use(const std::string& key) const;
  void add_cache_key(std::uint32_t job_id, const std::string& key,
                     registry::Registry::KeyUse use = registry::Registry::KeyUse::linked); // saved soon
  bool key_viewed(const std::string& key) const;

  // The two halves of a write, apart for the tests: a copy (the next generation) taken under the
  // lock, and its write, skipped when a later generation is on disk already.
  struct Copy
  {
    std::uint64_t generation = 0;
    registry::Registry registry;
  };
  Copy copy();
  void write(const Copy& copy);

  static constexpr std::chrono::seconds k_save_every{1};

private:
  void changed_locked();
  Copy copy_locked();
  void save_loop();

  const std::chrono::milliseconds m_save_every;

  mutable std::mutex m_mutex; // guards everything below, up to m_write_mutex
  registry::Registry m_registry;
  bool m_dirty = false; // changed since m_saved_at
  std::chrono::steady_clock::time_point m_saved_at;
  std::uint64_t m_generation = 0; // of the last copy
  bool m_stopping = false;
  std::condition_variable m_cv; // a change, or the saver asked to stop
  std::thread m_saver; // own thread: the daemon's

  std::mutex m_write_mutex;   // one write at a time; guards the two below
  UniqueFd m_state_dir;       // set once by open(), before any write
  std::uint64_t m_written = 0; // generation on disk, or whose write failed (a later one is retried)
  bool m_failing = false;      // the last write failed (logged once until one succeeds)
};

} // namespace stagehand::service
