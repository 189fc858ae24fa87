// The CPUs a process may run on (its affinity: a job's task has the job's cores, as Slurm's task
// plugin or its cgroup's cpuset gives them), and a process put on them: the job's work that
// stagehandd's children do for it runs where the job's own would.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace stagehand {

// The CPUs `pid` may run on, ascending; empty when they cannot be read.
std::vector<int> affinity_of(pid_t pid);

// Puts the calling thread (a fresh child: the whole process) on `cpus`; nothing for an empty list.
// False when the kernel refuses (none of them online, or outside the caller's cpuset).
bool run_on(const std::vector<int>& cpus);

// "0-3,8", for logs and messages.
std::string cpu_ranges(const std::vector<int>& cpus);

} // namespace stagehand
