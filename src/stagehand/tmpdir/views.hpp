// Cache views (issue 25 item 4): where root keeps what it mounted for a job's hits, and the record
// that tells the job's tasks which sources are shown as views (and whether the daemon answered).
// Layout under the tmpdir base: `.views/` (root's, 0700), `.views/job_<id>/` (root's, 0700)
// holding `lock` (flock: the tasks of a job run task_init_privileged at once), one record per
// --stage-data value (`record.<hash>`) and `<n>/` per view (the overlay's upper/ and work/). Never
// in the user's directory; removed after the views are detached (epilog, GC), fd-relative, never
// through a mount.
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::tmpdir {

inline constexpr const char* k_views_dir = ".views";
std::string job_views_name(std::uint32_t job_id);
// The job of a `.views/` entry's name ("job_<id>"), or 0.
std::uint32_t job_of_views_name(const std::string& name);

// Whether a view's entry was in the cache already, or read into it for this job at task start
// (the daemon's cache_view, for the first of the jobs asking for a source nobody read yet).
enum class ViewOrigin { hit, read };

// One source shown as a view: its destination (relative to SLURM_TMPDIR) and what the cache entry
// holds, for the summary line.
struct View
{
  std::string dest;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  stage::Placement how = stage::Placement::copied;
  ViewOrigin origin = ViewOrigin::hit;
  std::uint64_t read_ms = 0; // a read's milliseconds
  bool operator==(const View&) const = default;
};

// "FILES BYTES HOW DEST" ("HOW,read=MS" for a read): a record's line after "view ", and the staging
// helper's --view value.
// A destination with a control character is refused, and so is a line with another HOW.
Result<std::string> view_line(const View& v);
Result<View> parse_view_line(std::string_view line);

// What task start leaves for the job's tasks on this node: the views it made, and, when the node
// daemon did not answer it, why (the staging helper then does not ask the daemon again).
struct ViewRecord
{
  std::vector<View> views;
  std::string daemon_silent; // empty: the daemon answered, or none runs here
  bool operator==(const ViewRecord&) const = default;
};

// The record: one line "view FILES BYTES HOW DEST" per view, then "silent REASON" if the daemon
// did not answer (a control character in REASON is written as '?').
Result<std::string> format_view_record(const ViewRecord& record);
Result<ViewRecord> parse_view_record(const std::string& text);

// Where a view of `spec`'s source would be mounted, relative to SLURM_TMPDIR; nullopt for a spec
// no view may stand for. Only a canonical (absolute) source whose destination is one name in the
// job's directory (a view's mount point is root's, directly in the job's directory, which its user
// cannot move elsewhere); an archive named after its source loses its suffix, as it would when it
// unpacks (a view is only ever of an unpacked archive or a directory).
std::optional<std::string> view_dest(const stage::StageSpec& spec);

// The summary line of a source shown as view `v`, as the staging helper prints it for a hit.
std::string view_summary(const View& v, const std::string& shown, const std::string& tmpdir_path);

// The summary lines of a staging (canonical `specs`) whose every source root showed as one of
// `views`: nothing is left to stage. nullopt when a source is not shown as a view or the specs do
// not parse: the helper then stages what is left.
std::optional<std::vector<std::string>> views_only_summaries(std::string_view specs, const std::vector<View>& views,
                                                             const std::string& tmpdir_path);

// Removes `.views/job_<id>` below the base (ENOENT: nothing to do). Call only once the job's views
// are detached: the walk never crosses a mount, so a view still mounted makes it fail (EBUSY).
Status remove_job_views(int base_fd, std::uint32_t job_id);

} // namespace stagehand::tmpdir
