// stagehandd's reloads (SIGHUP) on a thread of their own: the server's loop only asks for one, so
// a reload that waits (a cache_dir moved to a filesystem that hangs, every manifest of a large
// cache read, a name service that does not answer for [daemon] user) holds up no accept and no
// request. Reloads asked while one runs make one more after it, never one each.
#pragma once

#include <functional>
#include <memory>
#include <thread>

namespace stagehand::service {

// Its calls come from one thread (the server's loop, then the shutdown after it). What `reload`
// refers to must outlive a thread stop() leaves running: the daemon exits (_exit) right after.
class ReloadThread
{
public:
  // Starts the thread; where no thread can be had, each reload runs in ask()'s caller, as before.
  explicit ReloadThread(std::function<void()> reload);
  ~ReloadThread() { (void)stop(); }
  ReloadThread(const ReloadThread&) = delete;
  ReloadThread& operator=(const ReloadThread&) = delete;

  // A reload, after the one under way if any (asks coalesce, and one asked while a reload runs
  // says so in the log); none once closed.
  void ask();
  // No reload from now on: one asked and not begun is dropped; one under way goes on.
  void close();
  // Whether a reload runs or waits to.
  bool busy() const;
  // close(), and the thread ended: joined when no reload runs, and true; else left to end with the
  // process (a reload stuck in the kernel cannot be cut short), and false.
  bool stop();

private:
  struct State;
  static void loop(const std::shared_ptr<State>& state);

  std::shared_ptr<State> m_state; // the thread's too: a thread left running outlives this object
  std::thread m_thread; // own thread: the daemon's
};

} // namespace stagehand::service
