// libFuzzer target: the --stage-data grammar on arbitrary bytes never crashes, and escaping is
// exact: every parsed spec, written back with escape_spec_field, parses to the same spec.
#include "stagehand/stage/spec.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace stagehand::stage;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size > 4096) {
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto specs = parse_stage_option(text);
  if (!specs) {
    return 0;
  }
  for (const auto& spec : *specs) {
    if (spec.src.empty()) {
      std::abort();
    }
    std::string again = (spec.tilde == Tilde::literal && spec.src.front() == '~' ? "\\" : "") +
                        escape_spec_field(spec.src);
    if (!spec.dest.empty() || spec.unpack == Unpack::never || spec.dest_from == DestFrom::source_name) {
      again += ":" + escape_spec_field(spec.dest);
    }
    if (spec.unpack == Unpack::never) {
      again += ":copy";
    } else if (spec.dest_from == DestFrom::source_name) {
      again += ":auto";
    }
    if (again == "(null)") {
      continue; // the whole value "(null)" is Slurm's NULL, refused as no value; "\\(null)" names the file
    }
    auto round = parse_stage_option(again);
    if (!round || round->size() != 1 || (*round)[0] != spec) {
      std::abort();
    }
    (void)strip_archive_suffix(spec.src);
    (void)expand_tilde(spec.src, Tilde::literal);
  }
  return 0;
}
