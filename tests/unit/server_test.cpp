// stagehandd's socket server over a real Unix socket, with a fake handler and the CLI's own client:
// who called reaches the handler, reply frames come back in order, a request past the limits waits
// its turn and is then answered busy, bad input gets an error while the server goes on, stop() ends it.
#include "stagehand/service/server.hpp"

#include "stagehand/ipc/client.hpp"
#include "stagehand/proto/frame.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace stagehand;
using namespace stagehand::test;
using namespace std::chrono_literals;

namespace {

// Long enough never to matter on a loaded machine; a wait that takes this long is a hang.
constexpr auto k_hang = 60s;
constexpr uid_t k_other_uid = 4243;

std::string describe(const service::Peer& p)
{
  std::string s = "uid " + std::to_string(p.uid) + " gid " + std::to_string(p.gid) + " groups";
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    s += (i == 0 ? " " : ",") + std::to_string(p.groups[i]);
  }
  return s;
}

// The request's operation and its caller's uid, as the handler saw them: "status 4242".
std::string entry(const proto::Request& r, const service::Peer& p)
{
  return std::string(proto::op_name(r)) + " " + std::to_string(p.uid);
}

// A stand-in for the daemon: `status` is answered with three progress frames, then the caller's
// ids as the node's name; `gc` is held until release(); `cache_list` throws; anything else is done.
class FakeHandler
{
public:
  void operator()(const proto::Request& r, const service::Peer& p, service::Responder& out)
  {
    {
      std::lock_guard lock(m_mutex);
      m_entries.push_back(entry(r, p));
    }
    if (std::holds_alternative<proto::StatusQuery>(r)) {
      for (const char* step : {"one", "two", "three"}) {
        out.progress(proto::Progress{step, 1, 3, 0});
      }
      proto::StatusReply reply;
      reply.node = describe(p);
      out.result(reply);
    } else if (std::holds_alternative<proto::Gc>(r)) {
      std::unique_lock lock(m_mutex);
      ++m_holding;
      m_cv.notify_all();
      m_cv.wait(lock, [&] { return m_released; });
      --m_holding;
      out.result(proto::Done{});
    } else if (std::holds_alternative<proto::CacheList>(r)) {
      throw std::runtime_error("the handler failed");
    } else {
      out.result(proto::Done{});
    }
  }

  // Whether `n` held requests are in the handler now (false after k_hang).
  bool holding(int n)
  {
    std::unique_lock lock(m_mutex);
    return m_cv.wait_for(lock, k_hang, [&] { return m_holding == n; });
  }

  void release()
  {
    std::lock_guard lock(m_mutex);
    m_released = true;
    m_cv.notify_all();
  }

  std::vector<std::string> entries()
  {
    std::lock_guard lock(m_mutex);
    return m_entries;
  }

private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::vector<std::string> m_entries;
  int m_holding = 0;
  bool m_released = false;
};

// What the server logs, for the tests to wait on (the log lines an admin reads).
class LogCapture
{
  class Sink : public spdlog::sinks::base_sink<std::mutex>
  {
  public:
    explicit Sink(LogCapture& owner) : m_owner(owner) {}

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override
    {
      std::lock_guard lock(m_owner.m_mutex);
      m_owner.m_lines.emplace_back(msg.payload.data(), msg.payload.size());
      m_owner.m_cv.notify_all();
    }
    void flush_() override {}

  private:
    LogCapture& m_owner;
  };

public:
  LogCapture() : m_previous(spdlog::default_logger())
  {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("server_test", std::make_shared<Sink>(*this)));
  }
  ~LogCapture() { spdlog::set_default_logger(m_previous); }

  // Whether `count` lines containing `text` were logged (false after k_hang).
  bool logged(const std::string& text, std::size_t count = 1)
  {
    std::unique_lock lock(m_mutex);
    return m_cv.wait_for(lock, k_hang, [&] {
      std::size_t seen = 0;
      for (const auto& line : m_lines) {
        seen += line.find(text) != std::string::npos ? 1 : 0;
      }
      return seen >= count;
    });
  }

  // How many lines containing `text` were logged so far.
  std::size_t count(const std::string& text)
  {
    std::lock_guard lock(m_mutex);
    return static_cast<std::size_t>(
      std::count_if(m_lines.begin(), m_lines.end(), [&](const std::string& line) { return line.find(text) != std::string::npos; }));
  }

private:
  std::shared_ptr<spdlog::logger> m_previous;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::vector<std::string> m_lines;
};

// The server on a socket in a temporary directory, running on its own thread until the end of the
// test (held requests are released first, as a server waits for its requests to end). `before`
// runs on that thread once the socket listens, before the server looks at it.
class RunningServer
{
public:
  RunningServer(FakeHandler& handler, service::ServerLimits limits,
                std::function<void(const std::string&)> before = nullptr, service::Screen screen = nullptr)
    : m_handler(handler), m_socket(m_dir / "run/stagehandd.sock"),
      m_server([&handler](const proto::Request& r, const service::Peer& p, service::Responder& out) { handler(r, p, out); },
               listening(m_socket), limits, std::move(screen)),
      m_thread([this, before = std::move(before)] {
        if (before) {
          before(m_socket);
        }
        m_server.run();
      })
  {
  }
  ~RunningServer()
  {
    m_handler.release();
    m_server.stop();
    m_thread.join();
  }
  const std::string& socket() const { return m_socket; }
  service::Server& server() { return m_server; }
  // Ends run() and waits for it.
  void stop()
  {
    m_server.stop();
    m_thread.join();
    m_thread = std::thread([] {});
  }

private:
  static UniqueFd listening(const std::string& path)
  {
    auto fd = service::listen_socket(path);
    if (!fd) {
      throw std::runtime_error(fd.error().message);
    }
    return std::move(*fd);
  }

  FakeHandler& m_handler;
  TempDir m_dir;
  std::string m_socket;
  service::Server m_server;
  std::thread m_thread;
};

// One reply frame as a line: "progress SOURCE", "ok" (with the node's name of a status reply), or
// "KIND: message".
std::string frame_line(const proto::ReplyFrame& f)
{
  if (f.progress) {
    return "progress " + f.progress->source;
  }
  if (f.error) {
    return std::string(kind_name(f.error->kind)) + ": " + f.error->message;
  }
  auto status = proto::parse_status_reply(f.result_json);
  return status && !status->node.empty() ? "ok " + status->node : "ok";
}

// What a call came back with, as one line: its result frame's, then " progress a,b,c" when
// progress frames came before it; "client KIND: message" when the client failed.
std::string outcome(const Result<proto::ReplyFrame>& r, const std::vector<std::string>& progress = {})
{
  if (!r) {
    return std::string("client ") + kind_name(r.error().kind) + ": " + r.error().message;
  }
  std::string s = frame_line(*r);
  for (std::size_t i = 0; i < progress.size(); ++i) {
    s += (i == 0 ? " progress " : ",") + progress[i];
  }
  return s;
}

// Sends `request` with the CLI's client; what came back.
std::string call(const std::string& socket, const proto::Request& request)
{
  std::vector<std::string> progress;
  auto r = ipc::call(socket, request, ipc::CallOptions{}, [&](const proto::Progress& p) { progress.push_back(p.source); });
  return outcome(r, progress);
}

// Runs `fn` in a child as `uid` (its gid the same, with `groups`); what it returned.
std::string as_user(uid_t uid, const std::vector<gid_t>& groups, const std::function<std::string()>& fn)
{
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return "pipe failed";
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      ::_exit(99);
    }
    const std::string said = fn();
    (void)!::write(fds[1], said.data(), said.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? said : "the child failed: " + std::to_string(status);
}

// The same, as a call from `uid`, on a thread of its own.
std::future<std::string> call_as(uid_t uid, const std::string& socket, proto::Request request)
{
  return std::async(std::launch::async, [=] { return as_user(uid, {uid}, [&] { return call(socket, request); }); });
}

UniqueFd connect_to(const std::string& socket)
{
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0) {
    return UniqueFd();
  }
  return fd;
}

// Sends `bytes` as they are, then reads what comes back until the server closes the connection:
// each reply frame as one line (frame_line).
std::vector<std::string> send_raw(const std::string& socket, const std::string& bytes)
{
  UniqueFd fd = connect_to(socket);
  if (!fd.valid() || ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return {"cannot send"};
  }
  std::vector<std::string> frames;
  proto::FrameReader reader(proto::k_max_response_bytes);
  char buf[4096];
  for (;;) {
    struct pollfd p {fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(k_hang).count())) != 1) {
      frames.push_back("no end");
      return frames;
    }
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n <= 0) {
      return frames;
    }
    (void)reader.feed(buf, static_cast<std::size_t>(n));
    while (auto payload = reader.next()) {
      auto frame = proto::parse_reply_frame(*payload);
      frames.push_back(frame ? frame_line(*frame) : "unparsable: " + *payload);
    }
  }
}

service::ServerLimits small_limits(std::chrono::milliseconds queue_wait = 60s)
{
  service::ServerLimits limits;
  limits.max_in_flight = 8;
  limits.max_in_flight_per_uid = 1;
  limits.queue_wait = queue_wait; // (60 s: a waiting request always gets its turn in these tests)
  return limits;
}

} // namespace

TEST(Server, TheHandlerGetsTheCallersUidGidAndGroups)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  RunningServer s(handler, {});
  EXPECT_EQ(as_user(k_attacker_uid, {k_attacker_gid, 4300, 4301}, [&] { return call(s.socket(), proto::StatusQuery{}); }),
            "ok uid 4242 gid 4242 groups 4242,4300,4301 progress one,two,three");
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).rfind("ok uid 0 gid 0 groups", 0), 0u);
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"status 4242", "status 0"}));
}

TEST(Server, ProgressFramesComeBeforeTheResultInTheirOrder)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  RunningServer s(handler, {});
  auto frames = send_raw(s.socket(), proto::encode_frame(proto::serialize(proto::StatusQuery{})));
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0], "progress one");
  EXPECT_EQ(frames[1], "progress two");
  EXPECT_EQ(frames[2], "progress three");
  EXPECT_EQ(frames[3].rfind("ok uid 0 gid 0", 0), 0u) << frames[3];
  // The CLI's client hands the progress frames to its sink in the same order, then the result.
  const std::string said = call(s.socket(), proto::StatusQuery{});
  EXPECT_EQ(said.rfind("ok uid 0 ", 0), 0u) << said;
  EXPECT_NE(said.find(" progress one,two,three"), std::string::npos) << said;
}

TEST(Server, AUserPastTheirShareWaitsTheirTurnWhileRootAndOthersGoOn)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  RunningServer s(handler, small_limits());
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  auto waiting = call_as(k_attacker_uid, s.socket(), proto::StatusQuery{});
  ASSERT_TRUE(log.logged("a request of uid 4242 waits for a turn (1 running, 1 of them its own)"));
  // Root never waits; another user has a share of their own.
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 ");
  EXPECT_EQ(call_as(k_other_uid, s.socket(), proto::StatusQuery{}).get().substr(0, 12), "ok uid 4243 ");
  handler.release();
  EXPECT_EQ(held.get(), "ok");
  EXPECT_EQ(waiting.get().substr(0, 12), "ok uid 4242 ");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"gc 4242", "status 0", "status 4243", "status 4242"}));
}

TEST(Server, WaitingRequestsStartInTheOrderTheyCame)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  RunningServer s(handler, small_limits());
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  auto first = call_as(k_attacker_uid, s.socket(), proto::StatusQuery{});
  ASSERT_TRUE(log.logged("a request of uid 4242 waits for a turn"));
  auto second = call_as(k_attacker_uid, s.socket(), proto::EndJob{});
  ASSERT_TRUE(log.logged("a request of uid 4242 waits for a turn", 2));
  handler.release();
  EXPECT_EQ(held.get(), "ok");
  EXPECT_EQ(first.get().substr(0, 12), "ok uid 4242 ");
  EXPECT_EQ(second.get(), "ok");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"gc 4242", "status 4242", "end_job 4242"}));
}

TEST(Server, ARequestThatFindsNoTurnInTimeIsAnsweredBusy)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  auto limits = small_limits();
  limits.queue_wait = 100ms;
  RunningServer s(handler, limits);
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  EXPECT_EQ(call_as(k_attacker_uid, s.socket(), proto::StatusQuery{}).get(),
            "limit: the daemon is busy (1 requests running, waited 0 s for a turn)");
  EXPECT_TRUE(log.logged("a request of uid 4242 found no turn within 100 ms: answered busy"));
  handler.release();
  EXPECT_EQ(held.get(), "ok");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"gc 4242"})); // the busy request never reached it
}

// A screen that refuses a user's status while `refusing` is set ("not now", as the daemon does
// while its node lock is out of reach), and lets everything else wait its turn.
service::Screen refusing_status(const std::atomic<bool>& refusing)
{
  return [&refusing](const proto::Request& r, const service::Peer& p) -> std::optional<Error> {
    if (refusing && std::holds_alternative<proto::StatusQuery>(r) && !p.root()) {
      return Error::io("not now", EAGAIN);
    }
    return std::nullopt;
  };
}

// Requests held where a disk stopped answering keep their turns: one that would wait behind them
// and that the daemon cannot serve anyway is answered at once, not "busy" after queue_wait.
TEST(Server, ARequestThatWouldWaitForATurnIsAnsweredAtOnceWhenTheScreenRefusesIt)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  std::atomic<bool> refusing{true};
  RunningServer s(handler, small_limits(30s), nullptr, refusing_status(refusing));
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  auto refused = call_as(k_attacker_uid, s.socket(), proto::StatusQuery{});
  ASSERT_EQ(refused.wait_for(20s), std::future_status::ready); // not after queue_wait
  EXPECT_EQ(refused.get(), "io: not now");
  EXPECT_TRUE(log.logged("a status request of uid 4242 is answered without waiting for its turn: not now"));
  // Root has a turn (the handler answers it, as the daemon's own check does); a request the screen
  // lets through waits its turn as before.
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 ");
  auto waiting = call_as(k_attacker_uid, s.socket(), proto::EndJob{});
  ASSERT_TRUE(log.logged("a request of uid 4242 waits for a turn"));
  handler.release();
  EXPECT_EQ(held.get(), "ok");
  EXPECT_EQ(waiting.get(), "ok");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"gc 4242", "status 0", "end_job 4242"}));
  EXPECT_EQ(log.count("waits for a turn"), 1u); // the end_job's: the refused one never waited
}

// The daemon may become unable to serve while a request waits (its node lock out of reach past
// the patience): the waiting request is then answered at once too.
TEST(Server, ARequestWaitingForATurnIsAnsweredOnceTheScreenRefusesIt)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  std::atomic<bool> refusing{false};
  RunningServer s(handler, small_limits(30s), nullptr, refusing_status(refusing));
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  auto waiting = call_as(k_attacker_uid, s.socket(), proto::StatusQuery{});
  ASSERT_TRUE(log.logged("a request of uid 4242 waits for a turn"));
  refusing = true;
  ASSERT_EQ(waiting.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(waiting.get(), "io: not now");
  handler.release();
  EXPECT_EQ(held.get(), "ok");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"gc 4242"})); // the refused one never reached it
}

// A daemon stopped or stuck: requests wait in the socket's queue, and their clients give up and do
// the work without it (stage, copy, clean up). Woken, it must not do the same work beside them:
// a request whose client is gone before it starts is dropped, never handled, and the log says so.
TEST(Server, ARequestWhoseClientGaveUpBeforeItStartedIsNeverHandled)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  bool sent = false;
  RunningServer s(handler, small_limits(), [&](const std::string& socket) {
    UniqueFd gave_up = connect_to(socket);
    const std::string frame = proto::encode_frame(proto::serialize(proto::Request{proto::CacheEvict{"/gone", false}}));
    sent = gave_up.valid() && ::send(gave_up.get(), frame.data(), frame.size(), MSG_NOSIGNAL) ==
                                static_cast<ssize_t>(frame.size());
  });
  EXPECT_TRUE(log.logged("a cache_evict request of uid 0 dropped: its client gave up waiting before it started"));
  EXPECT_TRUE(sent);
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).rfind("ok uid 0", 0), 0u); // it goes on
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"status 0"}));
}

// A client that shut down only its writing after its request (as socat does) still reads: it is
// answered, not dropped.
TEST(Server, AClientThatOnlyStopsWritingIsStillAnswered)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  RunningServer s(handler, small_limits());
  UniqueFd c = connect_to(s.socket());
  ASSERT_TRUE(c.valid());
  const std::string frame = proto::encode_frame(proto::serialize(proto::Request{proto::CacheEvict{"/x", false}}));
  ASSERT_EQ(::send(c.get(), frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  ASSERT_EQ(::shutdown(c.get(), SHUT_WR), 0);
  proto::FrameReader reader(proto::k_max_response_bytes);
  char buf[4096];
  std::optional<std::string> payload;
  for (;;) {
    struct pollfd p {c.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(k_hang).count())), 1);
    const ssize_t n = ::recv(c.get(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "closed without an answer";
    ASSERT_TRUE(reader.feed(buf, static_cast<std::size_t>(n)));
    if ((payload = reader.next())) {
      break;
    }
  }
  auto reply = proto::parse_reply_frame(*payload);
  ASSERT_TRUE(reply);
  EXPECT_EQ(frame_line(*reply), "ok");
  EXPECT_EQ(handler.entries(), (std::vector<std::string>{"cache_evict 0"}));
}

TEST(Server, RequestsAtOnceAreSharedByAllUsersButNeverRefuseRoot)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  service::ServerLimits limits;
  limits.max_in_flight = 1;
  limits.max_in_flight_per_uid = 4;
  limits.queue_wait = 100ms;
  RunningServer s(handler, limits);
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  EXPECT_EQ(call_as(k_other_uid, s.socket(), proto::StatusQuery{}).get(),
            "limit: the daemon is busy (1 requests running, waited 0 s for a turn)");
  EXPECT_TRUE(log.logged("a request of uid 4243 waits for a turn (1 running, 0 of them its own)"));
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 ");
  handler.release();
  EXPECT_EQ(held.get(), "ok");
}

TEST(Server, ConnectionsPastAUsersLimitAreRefused)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  service::ServerLimits limits;
  limits.max_per_uid = 2;
  RunningServer s(handler, limits);
  // Two connections that send nothing yet hold the user's share.
  EXPECT_EQ(as_user(k_attacker_uid, {k_attacker_gid}, [&] {
              UniqueFd a = connect_to(s.socket());
              UniqueFd b = connect_to(s.socket());
              return call(s.socket(), proto::StatusQuery{});
            }),
            "limit: too many connections; try again later");
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 "); // root has no such limit
  EXPECT_EQ(call_as(k_attacker_uid, s.socket(), proto::StatusQuery{}).get().substr(0, 12), "ok uid 4242 ");
}

TEST(Server, BadRequestsGetAnErrorAndTheServerGoesOn)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  service::ServerLimits limits;
  limits.request_deadline = 100ms;
  RunningServer s(handler, limits);
  auto garbage = send_raw(s.socket(), proto::encode_frame("this is not json"));
  ASSERT_EQ(garbage.size(), 1u);
  EXPECT_NE(garbage[0].rfind("ok", 0), 0u) << garbage[0];
  auto unknown = send_raw(s.socket(), proto::encode_frame(R"({"v":1,"op":"rm -rf /"})"));
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_NE(unknown[0].rfind("ok", 0), 0u) << unknown[0];
  EXPECT_EQ(send_raw(s.socket(), std::string("\xff\xff\xff\xff", 4) + "abc"),
            (std::vector<std::string>{"limit: protocol: frame larger than 65536 bytes"}));
  EXPECT_EQ(send_raw(s.socket(), proto::encode_frame(proto::serialize(proto::StatusQuery{})).substr(0, 8)),
            (std::vector<std::string>{"limit: no complete request within the deadline"}));
  EXPECT_EQ(handler.entries(), std::vector<std::string>{}); // none of them reached the handler
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 ");
}

TEST(Server, AHandlerThatThrowsIsAnsweredAsAnInternalError)
{
  STAGEHAND_REQUIRE_ROOT();
  LogCapture log;
  FakeHandler handler;
  RunningServer s(handler, {});
  EXPECT_EQ(call(s.socket(), proto::CacheList{}), "internal: internal error: the handler failed");
  EXPECT_TRUE(log.logged("internal error: the handler failed"));
  EXPECT_EQ(call(s.socket(), proto::StatusQuery{}).substr(0, 9), "ok uid 0 ");
}

TEST(Server, StopEndsTheLoopAndLetsRunningRequestsFinish)
{
  STAGEHAND_REQUIRE_ROOT();
  FakeHandler handler;
  RunningServer s(handler, {});
  auto held = call_as(k_attacker_uid, s.socket(), proto::Gc{});
  ASSERT_TRUE(handler.holding(1));
  s.stop(); // returns: the loop ended with a request still running
  EXPECT_EQ(s.server().in_flight(), 1u);
  handler.release();
  EXPECT_EQ(held.get(), "ok");
}

TEST(Server, LimitsFitTheOpenFilesLimit)
{
  // Each request in flight may hold 24 descriptors, each waiting connection one, the daemon 64.
  for (std::uint64_t open_files : {256u, 1024u, 4096u, 8192u, 65536u}) {
    const auto limits = service::limits_within(open_files);
    EXPECT_LE(limits.max_in_flight * 24 + limits.max_connections + 64, open_files) << open_files;
    EXPECT_GE(limits.max_in_flight, 2u) << open_files;
    EXPECT_LE(limits.max_per_uid, limits.max_connections / 2) << open_files;
  }
}
