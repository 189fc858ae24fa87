// Thread: pthread_create with pthread_attr_setstack on an mmap'd stack below a guard page.
#include "stagehand/util/thread.hpp"

#include <cxxabi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <memory>
#include <system_error>
#include <utility>

namespace stagehand {

namespace {

std::size_t guard_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

void* run(void* arg) // not noexcept: a forced unwind passes through to pthread
{
  std::unique_ptr<Thread::Body> body(static_cast<Thread::Body*>(arg));
  try {
    body->run();
  } catch (abi::__forced_unwind&) { // pthread_exit, a cancellation: theirs to finish
    throw;
  } catch (...) {
    std::terminate(); // as std::thread: what() is said by the terminate handler
  }
  return nullptr;
}

} // namespace

Thread::Thread(std::unique_ptr<Body> body)
{
  const std::size_t guard = guard_size();
  void* stack = ::mmap(nullptr, k_stack_size + guard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    throw std::system_error(errno, std::generic_category(), "cannot map a thread's stack");
  }
  // The stack grows down onto the guard page: an overflow faults instead of writing below it.
  if (::mprotect(stack, guard, PROT_NONE) != 0) {
    const int e = errno;
    ::munmap(stack, k_stack_size + guard);
    throw std::system_error(e, std::generic_category(), "cannot guard a thread's stack");
  }
  pthread_attr_t attr;
  int rc = ::pthread_attr_init(&attr);
  if (rc == 0) {
    rc = ::pthread_attr_setstack(&attr, static_cast<char*>(stack) + guard, k_stack_size);
  }
  if (rc == 0) {
    rc = ::pthread_create(&m_thread, &attr, run, body.get());
  }
  ::pthread_attr_destroy(&attr);
  if (rc != 0) {
    ::munmap(stack, k_stack_size + guard);
    throw std::system_error(rc, std::generic_category(), "cannot start a thread");
  }
  (void)body.release(); // the thread's now
  m_stack = stack;
}

Thread::Thread(Thread&& other) noexcept
  : m_thread(other.m_thread), m_stack(std::exchange(other.m_stack, nullptr)),
    m_detached(std::exchange(other.m_detached, false))
{
}

Thread& Thread::operator=(Thread&& other) noexcept
{
  if (this != &other) {
    if (joinable()) {
      std::terminate();
    }
    m_thread = other.m_thread;
    m_stack = std::exchange(other.m_stack, nullptr);
    m_detached = std::exchange(other.m_detached, false);
  }
  return *this;
}

Thread::~Thread()
{
  if (joinable()) {
    std::terminate();
  }
}

void Thread::join()
{
  if (!joinable()) {
    throw std::system_error(EINVAL, std::generic_category(), "no thread to join");
  }
  if (const int rc = ::pthread_join(m_thread, nullptr); rc != 0) { // EDEADLK: itself; its stack stays
    throw std::system_error(rc, std::generic_category(), "cannot join a thread");
  }
  release_stack();
}

void Thread::detach()
{
  if (!joinable()) {
    throw std::system_error(EINVAL, std::generic_category(), "no thread to detach");
  }
  ::pthread_detach(m_thread);
  m_detached = true; // the stack stays: the thread may still run on it
}

void Thread::release_stack()
{
  ::munmap(m_stack, k_stack_size + guard_size());
  m_stack = nullptr;
}

} // namespace stagehand
