// What the submit side (plugin/submit.cpp) hands a job's prolog and epilog through Slurm's job
// control environment (spank_job_control_setenv), and how they read it: slurmd gives those
// variables to the plugin's job prolog/epilog and to Prolog=/Epilog= scripts (`stagehand prolog`)
// with a "SPANK_" prefix. Option variables (SPANK__SLURM_SPANK_OPTION_...) are no use there:
// slurmd clears them before a Prolog= script runs.
#pragma once

#include "stagehand/job/stage_out.hpp"
#include "stagehand/stage/kinds.hpp"

#include <optional>

namespace stagehand::job {

// The names as the submit side sets them (without the prefix).
inline constexpr const char* k_stage_out_var = "STAGEHAND_STAGE_OUT";         // --stage-out's canonical entries
inline constexpr const char* k_stage_out_dir_var = "STAGEHAND_STAGE_OUT_DIR"; // the submit directory
inline constexpr const char* k_stage_data_var = "STAGEHAND_STAGE_DATA_ASKED"; // "1": --stage-data was given
// --stage-data's own option variable (the plugin also sets it in the job control environment;
// slurmd hands it to the plugin's prolog, not to a Prolog= script).
inline constexpr const char* k_stage_option_var = "_SLURM_SPANK_OPTION_stagehand_stage_data";

// The job's --stage-out, or none.
std::optional<StageOutJob> stage_out_of_job();

// Whether the job was submitted with --stage-data (the daemon is told at job start). Also taken
// from --stage-data's option variable, which the plugin's own prolog still sees (a job submitted
// by a plugin from before the job control variable).
stage::StagingAsked staging_of_job();

} // namespace stagehand::job
