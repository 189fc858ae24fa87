// Whom a node's staging of some specs reached, kept in the node's done marker: a "files" line when
// the specs have file sources (the only ones a broadcast sends, and so the only ones another node
// may wait for), and one "nodes" line listing the nodes of every broadcast scope it took part in
// (a step's, or the job's for the batch step; only its own node when the reader could not tell
// the others). A later step's first node that staged these specs already reads it: when every
// node of the step was reached before, or nobody could wait, it sends nothing; else it tells the
// step's nodes at once that nothing is sent (they read the sources themselves) instead of leaving
// them to wait out their deadline.
#pragma once

#include "stagehand/stage/request.hpp"

#include <string>
#include <string_view>

namespace stagehand::stage {

// A done marker's text: `files` as above, and `nodes` (a Slurm host list; "" for none).
std::string reach_text(bool files, std::string_view nodes);

// `marker` with the hosts of `nodes` added to whom it reached (one line: every host by name).
std::string with_reached(std::string_view marker, std::string_view nodes);

// Whether the marker says the specs have file sources.
bool has_files(std::string_view marker);

// Whether every host of `nodes` is named by the marker's "nodes" line. An empty or unreadable
// list, or a marker without the line (one written before it was), reaches nothing.
bool reached(std::string_view marker, std::string_view nodes);

// Whether a node that staged `request.specs` before (its done marker holds `marker`) still has
// work in this step: a broadcast's copy or marker left in the job's directory (a later reader sent
// it after this node had staged), or, as the step's reader, nodes of the step to tell (only with a
// known node list, which an older plugin does not give). Read by the plugin before it starts the
// helper (which then does that work) and by the helper itself.
bool owes_step(const StageRequest& request, std::string_view marker);

} // namespace stagehand::stage
