// The stagehand CLI's installed path, the plugin's default for plugstack's helper=.
#include "plugin.hpp"

namespace stagehand::plugin {

const char* const k_default_helper_path = STAGEHAND_HELPER_PATH;

} // namespace stagehand::plugin
