// Logged text from users (paths) cannot forge log lines: control characters are escaped, in the
// escaping function and in the log format stagehandd and the CLI install.
#include "common/log_format.hpp"
#include "stagehand/util/escape.hpp"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <gtest/gtest.h>

#include <sstream>

using namespace stagehand;

TEST(EscapeControl, EveryControlCharacterIsVisibleAndTheRestIsKept)
{
  EXPECT_EQ(escape_control("/data/plain/f.bin"), "/data/plain/f.bin");
  EXPECT_EQ(escape_control("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(escape_control(std::string("\x1b[31m\x7f\0z", 8)), "\\x1b[31m\\x7f\\x00z");
  EXPECT_EQ(escape_control("back\\slash"), "back\\\\slash") << "an escape cannot be faked either";
  EXPECT_EQ(escape_control("caf\xc3\xa9"), "caf\xc3\xa9") << "UTF-8 stays readable";
}

TEST(LogFormat, APathWithANewlineStaysOnItsLine)
{
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(out);
  spdlog::logger logger("test", sink);
  helper::set_escaping_pattern(logger, "%l: %v");
  const std::string path = "/home/eve/x\ninfo: job 1: registered (uid 0)";
  logger.info("job 7: {} (cache miss)", path);
  logger.flush();
  EXPECT_EQ(out.str(), "info: job 7: /home/eve/x\\ninfo: job 1: registered (uid 0) (cache miss)\n");
  // The formatter survives being cloned (spdlog clones it for each sink it is given to).
  auto clone = helper::EscapingFormatter("%v").clone();
  spdlog::memory_buf_t buf;
  spdlog::details::log_msg msg("test", spdlog::level::info, "a\rb");
  clone->format(msg, buf);
  EXPECT_EQ(std::string(buf.data(), buf.size()), "a\\rb\n");
}
