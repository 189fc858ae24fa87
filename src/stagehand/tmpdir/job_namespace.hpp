// Slurm's per-job private directories (namespace/tmpfs; job_container/tmpfs before 25.11) and
// [tmpdir] base. The plugin makes a job's directory in the node's mount namespace; a job that
// runs in such a namespace sees a private, empty copy of each directory in job_container.conf's
// Dirs (default /tmp and /dev/shm), so a base inside one of them is hidden from the job. A base
// beside them (the default, /local/stagehand) is seen by every job as on a node without it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::tmpdir {

// The value of the last `Key=value` for `key` (case-insensitive, as Slurm reads its files) in the
// text of a Slurm config file: '#' starts a comment, a line may hold several pairs
// (job_container.conf's `NodeName=... Dirs=...`), a value may be quoted.
std::optional<std::string> slurm_conf_value(std::string_view text, std::string_view key);

// The directories each job gets a private copy of, from the texts of slurm.conf and
// job_container.conf: none unless NamespaceType (or the older JobContainerType) names the tmpfs
// plugin; then Dirs, or Slurm's default /tmp and /dev/shm.
std::vector<std::string> private_job_dirs(std::string_view slurm_conf, std::string_view job_container_conf);

// The first of `dirs` that holds `base` (a [tmpdir] base; with %n, the path before it), compared
// by path components, or nothing.
std::optional<std::string> dir_hiding_base(std::string_view base, const std::vector<std::string>& dirs);

// The one line for the slurmd log and the job: base, the directory that hides it, what to do.
std::string hidden_base_message(std::string_view base, std::string_view dir);

} // namespace stagehand::tmpdir
