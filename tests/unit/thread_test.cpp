// Thread: the library's threads run on stacks of their own, never on one from glibc's stack cache,
// which in a child forked from a multi-threaded daemon holds the parent threads' stacks with their
// TLS tables as the fork found them (freeing what those name aborted a child once in 40,000
// stagings: "free(): double free detected in tcache 2"; util/thread.hpp).
#include "stagehand/util/fd.hpp"
#include "stagehand/util/thread.hpp"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

using namespace stagehand;

namespace {

// Where the calling thread's stack begins, as pthread says.
void* own_stack()
{
  pthread_attr_t attr;
  void* addr = nullptr;
  std::size_t size = 0;
  if (::pthread_getattr_np(::pthread_self(), &attr) == 0) {
    (void)::pthread_attr_getstack(&attr, &addr, &size);
    ::pthread_attr_destroy(&attr);
  }
  return addr;
}

} // namespace

TEST(Thread, NeverRunsOnAStackFromGlibcsCacheNotEvenInAForkedChild)
{
  // Three parent threads, alive at the fork: their stacks go into the child's stack cache.
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::vector<void*> parents(3, nullptr);
  std::atomic<int> ready{0};
  std::vector<std::thread> parked;
  for (auto& stack : parents) {
    parked.emplace_back([&] {
      stack = own_stack();
      ++ready;
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return release; });
    });
  }
  while (ready.load() < 3) {
    std::this_thread::yield();
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto cached = [&](void* stack) { return std::find(parents.begin(), parents.end(), stack) != parents.end(); };
    void* mine = nullptr;
    Thread([&] { mine = own_stack(); }).join();
    void* theirs = nullptr;
    std::thread([&] { theirs = own_stack(); }).join(); // the hazard itself: a parent's stack, reused
    ::_exit(mine == nullptr || cached(mine) ? 1 : !cached(theirs) ? 2 : 0);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : parked) {
    t.join();
  }
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_NE(WEXITSTATUS(status), 1) << "a Thread ran on a parent thread's cached stack";
  EXPECT_NE(WEXITSTATUS(status), 2) << "this glibc no longer reuses a parent's stack in a forked child: "
                                       "the test's control did not happen";
}

TEST(Thread, RunsMoveOnlyWork)
{
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  UniqueFd rd(p[0]);
  {
    UniqueFd wr(p[1]);
    Thread writer([fd = std::move(wr)] { (void)!::write(fd.get(), "x", 1); });
    EXPECT_TRUE(writer.joinable());
    Thread moved = std::move(writer);
    EXPECT_FALSE(writer.joinable()); // NOLINT(bugprone-use-after-move): what a move leaves
    EXPECT_TRUE(moved.joinable());
    moved.join();
    EXPECT_FALSE(moved.joinable());
  } // the write end went with the work
  char buf[2];
  EXPECT_EQ(::read(rd.get(), buf, sizeof buf), 1);
  EXPECT_EQ(::read(rd.get(), buf, sizeof buf), 0);
}

TEST(Thread, ADetachedThreadRunsOnAlone)
{
  std::atomic<bool> go{false};
  std::atomic<bool> done{false};
  Thread t([&] {
    while (!go.load()) {
      std::this_thread::yield();
    }
    done = true;
  });
  t.detach();
  EXPECT_FALSE(t.joinable());
  go = true;
  while (!done.load()) {
    std::this_thread::yield();
  }
}
