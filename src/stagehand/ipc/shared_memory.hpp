// A small object a child updates and its parent reads (counters of work done): shared memory made
// before the fork, so a child spawned after it sees the same object. The parent only ever reads
// numbers from it; whatever a child writes there cannot be more than a wrong number.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/mman.h>

#include <new>
#include <type_traits>
#include <utility>

namespace stagehand::ipc {

template<typename T> class SharedMemory
{
  static_assert(std::is_trivially_destructible_v<T>, "unmapped without a destructor");

public:
  static Result<SharedMemory> make()
  {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return Error::from_errno("cannot map shared memory");
    }
    return SharedMemory(new (p) T());
  }
  SharedMemory(SharedMemory&& other) noexcept : m_value(std::exchange(other.m_value, nullptr)) {}
  SharedMemory& operator=(SharedMemory&&) = delete;
  SharedMemory(const SharedMemory&) = delete;
  ~SharedMemory()
  {
    if (m_value) {
      ::munmap(static_cast<void*>(m_value), sizeof(T));
    }
  }

  T* get() const { return m_value; }
  T* operator->() const { return m_value; }

private:
  explicit SharedMemory(T* value) : m_value(value) {}
  T* m_value;
};

} // namespace stagehand::ipc
