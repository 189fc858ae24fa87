// A thread that is safe to start in a process forked from a multi-threaded one (every ipc::spawn_as
// child): it runs on a stack of its own making, never on one from glibc's stack cache.
//
// Why: at fork, glibc puts the stacks of the parent's other threads into the child's stack cache
// with their TLS tables as they were at that instant. A std::thread started in the child takes one
// of those stacks and frees what its table names, and its join frees the rest once the cache is
// over its size; a parent thread caught part-way through its own start (a daemon request thread
// after an NSS lookup that gave it dynamic TLS) leaves two tables naming one block, and the child
// aborts: "free(): double free detected in tcache 2" (seen once in 40,000 stagings on two busy
// cores, reproduced in a stress of forks beside such threads). A thread on a stack given with
// pthread_attr_setstack is never taken from that cache nor put back into it.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include <pthread.h>

namespace stagehand {

class Thread
{
public:
  Thread() = default;
  // Starts `fn` (moved in: it may hold descriptors) on a new thread; std::system_error when the
  // stack or the thread cannot be made (as std::thread). An exception out of `fn` ends the process
  // (as std::thread).
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Thread>>>
  explicit Thread(F&& fn) : Thread(std::unique_ptr<Body>(new Callable<std::decay_t<F>>(std::forward<F>(fn))))
  {
  }
  Thread(Thread&& other) noexcept;
  Thread& operator=(Thread&& other) noexcept; // as std::thread: the process ends if it held one
  Thread(const Thread&) = delete;
  Thread& operator=(const Thread&) = delete;
  // As std::thread, a thread still joinable ends the process (std::terminate): never a join that
  // could wait forever on an error path (a feeder blocked on a pipe nobody reads any more).
  ~Thread();

  bool joinable() const { return m_stack != nullptr && !m_detached; }
  // Waits for its end; its stack is then unmapped. std::system_error when it cannot be joined.
  void join();
  // Lets it run on alone. Its stack stays mapped until the process ends: only for a short-lived
  // process (a child's writer blocked in a disk's write, left to end with it).
  void detach();

  static constexpr std::size_t k_stack_size = 8U << 20; // glibc's default; untouched pages cost nothing

  struct Body
  {
    virtual ~Body() = default;
    virtual void run() = 0;
  };

private:
  template <class F>
  struct Callable final : Body
  {
    explicit Callable(F&& f) : fn(std::move(f)) {}
    explicit Callable(const F& f) : fn(f) {}
    void run() override { fn(); }
    F fn;
  };
  explicit Thread(std::unique_ptr<Body> body);
  void release_stack();

  pthread_t m_thread{};
  void* m_stack = nullptr; // the mapping, guard page included
  bool m_detached = false;
};

} // namespace stagehand
