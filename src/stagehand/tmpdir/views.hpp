// Cache views (issue 25 item 4): where root keeps what it mounted for a job's hits, and the record
// that tells the job's tasks which sources are shown as views. Layout under the tmpdir base:
// `.views/` (root's, 0700), `.views/job_<id>/` (root's, 0700) holding `lock` (flock: the tasks of a
// job run task_init_privileged at once), one record per --stage-data value (`record.<hash>`) and
// `<n>/` per view (the overlay's upper/ and work/). Never in the user's directory; removed after
// the views are detached (epilog, GC), fd-relative, never through a mount.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace stagehand::tmpdir {

inline constexpr const char* k_views_dir = ".views";
std::string job_views_name(std::uint32_t job_id);
// The job of a `.views/` entry's name ("job_<id>"), or 0.
std::uint32_t job_of_views_name(const std::string& name);

// The record: the destinations (relative to SLURM_TMPDIR) shown as views, one line each
// ("view DEST"). A destination with a control character is never a view (the record refuses it).
Result<std::string> format_view_record(const std::vector<std::string>& dests);
Result<std::vector<std::string>> parse_view_record(const std::string& text);

// Removes `.views/job_<id>` below the base (ENOENT: nothing to do). Call only once the job's views
// are detached: the walk never crosses a mount, so a view still mounted makes it fail (EBUSY).
Status remove_job_views(int base_fd, std::uint32_t job_id);

} // namespace stagehand::tmpdir
