// Whom a node's staging of some specs reached: the nodes of each broadcast scope it took part in
// (a step's, or the job's for the batch step), kept as "nodes HOSTLIST" lines in the node's done
// marker. A later step's first node that staged these specs already reads it: when every node of
// the step was reached before, nobody waits for a broadcast and it sends none; when not, it tells
// the step's nodes at once that there is nothing to wait for (they read the sources themselves)
// instead of leaving them to wait out their deadline.
#pragma once

#include "stagehand/stage/request.hpp"

#include <string>
#include <string_view>

namespace stagehand::stage {

// The line a done marker gains for a staging whose broadcast scope is `nodes` ("" for none).
std::string reach_line(std::string_view nodes);

// Whether every host of `nodes` is named by a "nodes" line of `marker` (a done marker's text).
// An empty or unreadable list, or a marker without such lines (one written before they were),
// reaches nothing: the caller then tells the step's nodes, which costs one small broadcast.
bool reached(std::string_view marker, std::string_view nodes);

// Whether a node that staged `request.specs` before (its done marker holds `marker`) still has
// work in this step: a broadcast's copy or marker left in the job's directory (a later reader sent
// it after this node had staged), or, as the step's reader, nodes of the step to tell. Read by
// the plugin before it starts the helper (which then does that work) and by the helper itself.
bool owes_step(const StageRequest& request, std::string_view marker);

} // namespace stagehand::stage
