// The PyTorch distributed environment of one task (or of the batch script), computed from the
// step's own layout: MASTER_ADDR/PORT, WORLD_SIZE, RANK, ..., and torchrun's PET_* variables.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/ddp/step_layout.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::ddp {

enum class Mode { automatic, tasks, torchrun };

// --ddp-env's argument: none/empty/"(null)" or "auto" is automatic; "tasks"; "torchrun".
Result<Mode> parse_mode(const char* arg);

struct EnvVar
{
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

// MASTER_PORT: port_min + (h(job, restart) + step) mod (port_max - port_min + 1). The same on
// every node; steps of one job get consecutive ports, so they never collide with each other.
int master_port(const DdpConfig& config, std::uint32_t job_id, std::uint32_t step_id, std::uint32_t restart_count);

// Applies the master_addr template ("{host}-ib") to a host name.
std::string master_addr(const DdpConfig& config, const std::string& first_host);

// torchrun's rendezvous timeouts (PET_RDZV_CONF read_timeout and join_timeout), in seconds: long
// enough for one node to finish staging its data while the others already wait (torch's
// defaults are 60 s and 600 s).
inline constexpr int k_rdzv_timeout_s = 3600;

// The variables for one task of the step (or, for a job-level step, MASTER_ADDR and NNODES
// only), followed by the [ddp.env] site defaults. MASTER_PORT is the step's reserved port when it
// has one, else master_port(). torchrun mode on a step with more than one task on a node is
// refused (every launcher would start its own workers and host the store).
Result<std::vector<EnvVar>> compute_environment(const DdpConfig& config, const StepLayout& step, Mode mode);

// The variable that records what stagehand exported, so that a later step (one inside a batch
// script, or an srun inside a task) can tell its own earlier values (which it replaces or
// removes) from the user's (which it never touches). Value: "JOBID;NAME:hash,NAME:hash", the hash
// of each value stagehand exported.
inline constexpr const char* k_marker_env = "STAGEHAND_DDP_SET";

using EnvLookupFn = std::function<std::optional<std::string>(const std::string&)>;

// The job id a marker was written for (nullopt for a marker without one).
std::optional<std::uint32_t> marker_job_id(std::string_view marker);

// The variables whose current value is still the one the marker says stagehand exported.
std::vector<std::string> stagehand_values(const EnvLookupFn& current);

struct ExportPlan
{
  std::vector<EnvVar> set;         // to export
  std::vector<std::string> unset;  // stagehand's earlier values that this task does not want
  std::string marker;              // the new marker's entries (NAME:hash,...), without the job id
};

// Decides what to export: a variable absent from the task's environment is set; one present is
// replaced only if the marker says stagehand set it to exactly its current value; a variable
// stagehand set earlier and not wanted now is removed (a tasks-mode step inside a torchrun-mode
// one loses the PET_* values).
ExportPlan plan_exports(const std::vector<EnvVar>& wanted, const EnvLookupFn& current);

} // namespace stagehand::ddp
