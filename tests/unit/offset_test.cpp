// fs::file_offset: a descriptor's offset, told at once even while a read on the same open file is
// stuck in the kernel (as one on a stalled shared filesystem is), where lseek would wait for it.
#include "stagehand/fs/offset.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

using namespace stagehand;

namespace {

int open_file(const test::TempDir& dir, std::size_t size)
{
  const std::string path = dir.path() + "/f";
  std::ofstream(path) << std::string(size, 'x');
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

} // namespace

TEST(FileOffset, IsWhereTheNextReadStarts)
{
  test::TempDir dir;
  const int fd = open_file(dir, 5000);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(fs::file_offset(fd), 0U);
  char buf[1234];
  ASSERT_EQ(::read(fd, buf, sizeof buf), 1234);
  EXPECT_EQ(fs::file_offset(fd), 1234U);
  ASSERT_EQ(::lseek(fd, 4321, SEEK_SET), 4321);
  EXPECT_EQ(fs::file_offset(fd), 4321U);
  ::close(fd);
  EXPECT_EQ(fs::file_offset(fd), 0U); // closed: nothing to tell
}

// A read() into a page that userfaultfd holds stays in the kernel, holding the open file's position
// lock, until the test supplies the page: a read stalled on a shared filesystem, made at will.
TEST(FileOffset, DoesNotWaitForAReadStuckOnTheSameFile)
{
  test::TempDir dir;
  const int fd = open_file(dir, 8192);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::lseek(fd, 100, SEEK_SET), 100);
  const int uffd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC));
  ASSERT_GE(uffd, 0) << "userfaultfd: " << std::strerror(errno) << " (the unit tests run as root)";
  uffdio_api api{};
  api.api = UFFD_API;
  ASSERT_EQ(::ioctl(uffd, UFFDIO_API, &api), 0) << std::strerror(errno);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  void* page = ::mmap(nullptr, static_cast<std::size_t>(page_size), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  uffdio_register reg{};
  reg.range = {reinterpret_cast<std::uintptr_t>(page), static_cast<std::uint64_t>(page_size)};
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  ASSERT_EQ(::ioctl(uffd, UFFDIO_REGISTER, &reg), 0) << std::strerror(errno);

  ssize_t got = -1;
  std::thread reader([&] { got = ::read(fd, page, static_cast<std::size_t>(page_size)); });
  uffd_msg msg{};
  ASSERT_EQ(::read(uffd, &msg, sizeof msg), static_cast<ssize_t>(sizeof msg)); // the reader is stuck
  ASSERT_EQ(msg.event, UFFD_EVENT_PAGEFAULT);

  auto asked = std::async(std::launch::async, [fd] { return fs::file_offset(fd); });
  // A bound for a hang, not a timing: with lseek(SEEK_CUR) the answer waits for the read.
  const bool answered = asked.wait_for(std::chrono::seconds(30)) == std::future_status::ready;

  uffdio_zeropage zero{};
  zero.range = reg.range;
  EXPECT_EQ(::ioctl(uffd, UFFDIO_ZEROPAGE, &zero), 0) << std::strerror(errno); // the read goes on
  reader.join();
  EXPECT_TRUE(answered) << "the offset waited for a read stuck on the same open file";
  EXPECT_EQ(asked.get(), 100U);
  EXPECT_EQ(got, page_size);
  EXPECT_EQ(fs::file_offset(fd), 100U + static_cast<std::uint64_t>(page_size));
  ::munmap(page, static_cast<std::size_t>(page_size));
  ::close(uffd);
  ::close(fd);
}
