// Opens an admin-configured directory (the tmpdir base) so that no user can redirect it.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <string>

namespace stagehand::fs {

enum class CreateMissing { no, yes };

// Resolves an absolute path component by component with O_NOFOLLOW. Every directory on the way
// must be owned by root and must not let others replace its entries (writable by others or by a
// non-root group is refused unless sticky, like /tmp); a symlink is followed only if root owns it;
// the final directory must not be writable by group or others. Errors name the path refused. With CreateMissing::yes, missing components are created 0755,
// owned by root. Returns an O_DIRECTORY fd of the final directory.
Result<UniqueFd> open_trusted_dir(const std::string& path, CreateMissing create);

} // namespace stagehand::fs
