// The record of a stage-out's results kept on the node.
#include "stagehand/stageout/kept.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/tmpdir/job_dir.hpp"

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <unistd.h>

#include <ctime>

namespace stagehand::stageout {

using json = nlohmann::json;

std::string to_json(const KeptResults& k)
{
  return json{{"version", 1},           {"job_id", k.job_id}, {"uid", k.uid},
              {"gid", k.gid},           {"dir", k.dir},       {"specs", k.specs},
              {"fallback_dir", k.fallback_dir}, {"until", k.until}, {"reason", k.reason}}
           .dump(1) +
         "\n";
}

Result<KeptResults> kept_from_json(std::string_view text)
{
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::io("kept stage-out results: not a record", EINVAL);
  }
  KeptResults k;
  try {
    k.job_id = j.at("job_id").get<std::uint32_t>();
    k.uid = j.at("uid").get<std::uint32_t>();
    k.gid = j.at("gid").get<std::uint32_t>();
    k.dir = j.at("dir").get<std::string>();
    k.specs = j.at("specs").get<std::string>();
    k.fallback_dir = j.value("fallback_dir", std::string());
    k.until = j.at("until").get<std::int64_t>();
    k.reason = j.value("reason", std::string());
  } catch (const json::exception& e) {
    return Error::io(std::string("kept stage-out results: ") + e.what(), EINVAL);
  }
  return k;
}

Status save_kept(int base_fd, const KeptResults& k)
{
  KeptResults capped = k; // the reason repeats paths the user chose: bounded, so the record stays readable
  if (capped.reason.size() > k_max_reason) {
    std::size_t cut = k_max_reason;
    while (cut > 0 && (static_cast<unsigned char>(capped.reason[cut]) & 0xC0) == 0x80) {
      --cut; // never inside a UTF-8 character: the record is JSON
    }
    capped.reason = capped.reason.substr(0, cut) + "...";
  }
  std::string text;
  try {
    text = to_json(capped);
  } catch (const json::exception&) { // never a record with other paths than the job's: none
    return Error::refused("a path of the stage-out is not valid UTF-8, which its record cannot carry");
  }
  return fs::write_file_atomic(base_fd, tmpdir::kept_record_name(k.dir), text, 0644);
}

std::vector<KeptResults> load_kept(int base_fd)
{
  std::vector<KeptResults> out;
  fs::DirStream d = fs::open_dir_stream(base_fd);
  if (!d) {
    return out;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d.get())) {
    if (tmpdir::dir_of_kept_record(e->d_name)) {
      names.emplace_back(e->d_name);
    }
  }
  for (const auto& name : names) {
    auto text = fs::read_small_file(base_fd, name, k_max_record_bytes);
    auto k = text ? kept_from_json(*text) : Result<KeptResults>(text.error());
    if (k && k->dir == tmpdir::dir_of_kept_record(name)) {
      out.push_back(std::move(*k));
    }
  }
  return out;
}

void remove_kept(int base_fd, const std::string& dir)
{
  ::unlinkat(base_fd, tmpdir::kept_record_name(dir).c_str(), 0);
}

namespace {

std::string utc(std::int64_t seconds)
{
  char when[32];
  std::time_t t = static_cast<std::time_t>(seconds);
  struct tm tm {};
  ::gmtime_r(&t, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return when;
}

} // namespace

std::string until_text(const KeptResults& k) { return utc(k.until); }

std::string kept_state(const KeptResults& k)
{
  return "stage-out failed, kept until " + utc(k.until) + ": " + k.reason;
}

std::string kept_line(const KeptResults& k, const std::string& base_path, const std::string& node)
{
  const std::string when = utc(k.until);
  return "stage-out could not complete (" + k.reason + "): the results stay on node " + node + " in " + base_path +
         "/" + k.dir + " until " + when + "; `stagehand stage-out retry " + std::to_string(k.job_id) +
         "` on that node copies them again";
}

} // namespace stagehand::stageout
