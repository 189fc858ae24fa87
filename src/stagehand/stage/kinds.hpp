// The kinds every layer shares, defined once: what a --stage-data source is and whether an
// archive is unpacked. The option grammar, the submit-time checks, the protocol, the cache's keys
// and the staging all use these (the protocol's words for them are in proto/messages.cpp).
#pragma once

namespace stagehand::stage {

// What a source is: a regular file (an archive or not) or a directory.
enum class SourceKind { file, dir };

// Whether an archive is unpacked: ":copy" copies an archive as it is.
enum class Unpack { if_archive, never };

} // namespace stagehand::stage
