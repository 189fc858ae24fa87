// A small object a child updates and its parent reads (counters of work done). The parent makes it
// (a memfd, mapped here with MADV_DONTFORK) and hands the descriptor to the one child that writes
// it, which maps it with attach(): no other child the process forks, in this thread or another,
// sees the object. The parent only ever reads numbers from it, and the memfd is sealed at its size
// (a child that shrank it would make the parent's next read a SIGBUS): whatever the child does
// there cannot be more than a wrong number.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <new>
#include <type_traits>
#include <utility>

namespace stagehand::ipc {

template<typename T> class SharedMemory
{
  static_assert(std::is_trivially_destructible_v<T>, "unmapped without a destructor");

public:
  // A new object, zeroed and constructed; fd() is what to give the child.
  static Result<SharedMemory> make()
  {
    UniqueFd fd(::memfd_create("stagehand-counters", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd.valid()) {
      return Error::from_errno("memfd_create");
    }
    if (::ftruncate(fd.get(), sizeof(T)) != 0) {
      return Error::from_errno("ftruncate of shared memory");
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return Error::from_errno("cannot seal shared memory");
    }
    auto mapped = map(fd.get());
    if (!mapped) {
      return mapped.error();
    }
    if (::madvise(static_cast<void*>(*mapped), sizeof(T), MADV_DONTFORK) != 0) {
      const Error e = Error::from_errno("madvise(MADV_DONTFORK)");
      ::munmap(static_cast<void*>(*mapped), sizeof(T));
      return e;
    }
    return SharedMemory(new (*mapped) T(), std::move(fd));
  }

  // In the child: the object behind a descriptor make() gave out (already constructed there).
  static Result<SharedMemory> attach(int fd)
  {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return Error::internal("shared memory not sealed at its size");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      return Error::from_errno("fstat of shared memory");
    }
    if (static_cast<std::size_t>(st.st_size) < sizeof(T)) {
      return Error::internal("shared memory smaller than its object");
    }
    auto mapped = map(fd);
    if (!mapped) {
      return mapped.error();
    }
    return SharedMemory(std::launder(reinterpret_cast<T*>(*mapped)), UniqueFd());
  }

  SharedMemory(SharedMemory&& other) noexcept
    : m_value(std::exchange(other.m_value, nullptr)), m_fd(std::move(other.m_fd))
  {
  }
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
  int fd() const { return m_fd.get(); } // made here: what to give the child; attached: -1
  void handed_out() { m_fd.reset(); }   // the child has it: the mapping stays, the descriptor goes

private:
  SharedMemory(T* value, UniqueFd fd) : m_value(value), m_fd(std::move(fd)) {}

  static Result<void*> map(int fd)
  {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      return Error::from_errno("cannot map shared memory");
    }
    return p;
  }

  T* m_value;
  UniqueFd m_fd;
};

} // namespace stagehand::ipc
