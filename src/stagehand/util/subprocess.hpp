// Running a program with a deadline and capturing its standard output.
#pragma once

#include "stagehand/util/result.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace stagehand {

struct ProcessOutput
{
  int exit_code = -1;
  std::string out;
};

// Runs argv[0] (looked up in PATH when it has no '/'), stdin from /dev/null, stderr discarded. Past
// the deadline the process is killed and the result is an io error with ETIMEDOUT. Output beyond
// `max_output` bytes is a limit error.
Result<ProcessOutput> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                  std::size_t max_output = 16U << 20);

} // namespace stagehand
