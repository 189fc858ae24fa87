// CPU priorities (nice values): stagehandd's own threads against the work it starts. Its request
// threads answer `stagehand status` and the plugin's calls while its children unpack and copy on
// every core; those children run at a job's priority, the cache's fills behind the jobs.
#pragma once

namespace stagehand {

inline constexpr int k_job_nice = 0;      // a job's tasks: the children doing a job's work, the fill and GC threads
inline constexpr int k_control_nice = -5; // the daemon's request threads (the packaged unit's Nice=)

// Sets the calling thread's nice value (on Linux a thread's own); false when it may not (a lower
// value needs CAP_SYS_NICE).
bool set_thread_nice(int nice);

// The calling thread's nice value.
int thread_nice();

} // namespace stagehand
