// The log format of stagehandd and the CLI: spdlog's pattern, with control characters in the
// message escaped (escape.hpp) so that a path holding a newline or an escape sequence can neither
// forge a log line nor drive the terminal or the journal. One place for every message: the paths
// logged come from users.
#pragma once

#include "stagehand/util/escape.hpp"

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>

#include <memory>
#include <string>

namespace stagehand::helper {

class EscapingFormatter final : public spdlog::formatter
{
public:
  explicit EscapingFormatter(std::string pattern)
    : m_pattern(std::move(pattern)), m_inner(std::make_unique<spdlog::pattern_formatter>(m_pattern))
  {
  }

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override
  {
    const std::string escaped = escape_control(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    m_inner->format(copy, dest);
    msg.color_range_start = copy.color_range_start; // the colour sinks read them from the original
    msg.color_range_end = copy.color_range_end;
  }

  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<EscapingFormatter>(m_pattern); }

private:
  std::string m_pattern;
  std::unique_ptr<spdlog::pattern_formatter> m_inner;
};

// `pattern` as for set_pattern(), with escaping.
inline void set_escaping_pattern(spdlog::logger& logger, const std::string& pattern)
{
  logger.set_formatter(std::make_unique<EscapingFormatter>(pattern));
}

} // namespace stagehand::helper
