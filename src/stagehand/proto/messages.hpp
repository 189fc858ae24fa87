// The daemon protocol's messages and their JSON mapping (docs/protocol.md). Pure: handlers get
// these structs, never bytes; the fuzz target drives parse_request with arbitrary input.
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace stagehand::proto {

inline constexpr int k_version = 1;
inline constexpr std::size_t k_max_sources = 256;
inline constexpr std::size_t k_max_string = 4096;

// --- requests ---------------------------------------------------------------------------

struct RegisterJob // root: the job's prolog ran on this node
{
  std::uint32_t job_id = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  stage::StagingAsked staging = stage::StagingAsked::yes; // optional "stage_data"; absent: yes
};

struct EndJob // root: the job's epilog ran; its directory was renamed to `trash` (or kept)
{
  std::uint32_t job_id = 0;
  std::string trash;           // name under the base of the renamed directory; "" when kept
  std::int64_t keep_until = 0; // when kept: the end of keep_for (epoch seconds)
  // --stage-out: the directory was renamed to `pending` (".stageout.job_<id>.<unique>") for the
  // daemon to copy `stage_out` (canonical entries) from, as the job user, then remove. Optional.
  std::string pending;
  std::string stage_out;
  std::string stage_out_dir; // where the log goes when DEST cannot take it
};

struct SourceSpec
{
  std::string shown; // as the user wrote it
  std::string path;  // canonical absolute path
  std::string dest;  // relative to SLURM_TMPDIR, normalised
  stage::SourceKind kind = stage::SourceKind::file;
  stage::Unpack unpack = stage::Unpack::if_archive;
  // A file source's copy that the job's read-once broadcast delivered, relative to the job's
  // directory: read instead of the source (whose open as the user stays the permission check and
  // whose identity the key). Optional ("" = read the source).
  std::string delivered;
  // The identity of the file the broadcast read (stage::identity_text): the copy is read only
  // while the source still has it. Optional (an older client: the copy's size alone is checked).
  std::string delivered_id{};
};

// What a stage request does with a source that is neither cached nor being read on the node:
// read it (the default), or leave it and say so (a multi-node job then broadcasts it).
enum class Misses { read, report };

struct Stage // the job's user (or root): stage these sources into the job's directory
{
  std::uint32_t job_id = 0;
  std::vector<SourceSpec> sources;
  std::uint64_t max_bytes = 0;
  Misses misses = Misses::read;
};

struct StatusQuery // anyone: what is on this node (a user sees only their own jobs)
{
};

struct CacheList // anyone: cache entries (a user sees those their jobs used)
{
};

struct CacheEvict // root
{
  std::string source; // canonical path; empty with all
  bool all = false;
};

struct Gc // root
{
  bool dry_run = false;
};

struct StageOutRetry // root, or the job's user: copy a job's kept stage-out results again
{
  std::uint32_t job_id = 0;
};

// What cache_view does with a miss its job claims (the first of the jobs starting together to ask):
// leaves it to the job's staging, or reads it into the cache itself and answers with the entry,
// which the job is then shown as a view like the others (one unpack of the source on the node,
// not the job's own and then the cache's). Only where the job reads its sources on this node
// itself: a broadcast's copy is on its way elsewhere.
enum class ClaimedMisses { staged, read_for_view };

// root, on behalf of the job (the plugin in task_init_privileged): which of these sources are cache
// hits for the job's user (identified as that user, as `stage` does)? A hit is pinned for the job
// (until its end) and named; a miss is never staged in the job's directory (ClaimedMisses).
struct CacheView
{
  std::uint32_t job_id = 0;
  std::vector<SourceSpec> sources;
  ClaimedMisses claimed = ClaimedMisses::staged;
  // read_for_view: the job's [stage] progress_interval (0: none): a read for its view not done by
  // then is left to the job's staging, which says how far it is.
  std::chrono::seconds progress_interval{0};
};

using Request = std::variant<RegisterJob, EndJob, Stage, StatusQuery, CacheList, CacheEvict, Gc, StageOutRetry, CacheView>;

const char* op_name(const Request& r);

// Parses one request payload. Unknown versions, operations, fields of the wrong type, oversized
// strings and lists are refused with a sentence naming the field.
Result<Request> parse_request(std::string_view payload);
// Throws nlohmann::json::type_error for a string that is not valid UTF-8 (JSON carries text only).
std::string serialize(const Request& r);
// The same, never throwing: such a request is an error that says why, errno EILSEQ (a path a user
// may well have: its client goes on without the daemon, as it would with none; nothing is asked).
Result<std::string> serialize_checked(const Request& r);

// --- replies ----------------------------------------------------------------------------
// Every reply frame is a JSON object with "v" and "type": "progress" frames may precede the one
// "result" frame, which has "ok" and either the operation's fields or "kind" and "error".

struct Progress
{
  std::string source;
  std::uint64_t done_bytes = 0;
  std::uint64_t total_bytes = 0; // 0 when unknown
  double seconds = 0;
};

// `absent`: not staged, by a request with `misses = report` (nothing of it was made).
enum class CacheOutcome { hit, miss, none, absent };
const char* outcome_name(CacheOutcome c);

struct StagedSource
{
  std::string shown;
  std::string dest;
  stage::Placement how = stage::Placement::copied;
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  CacheOutcome cache = CacheOutcome::none;
  std::string note; // e.g. "larger than the node cache"
};

struct StageReply
{
  std::vector<StagedSource> staged;
};

struct JobInfo
{
  std::uint32_t job_id = 0;
  std::string user;
  std::uint32_t uid = 0;
  std::string dir;
  std::string state; // running | kept | orphan
};

struct CacheStats
{
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t max_bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0;
  std::uint64_t fills_dropped = 0; // misses delivered but not cached (the cache could not keep up, its fill failed)
};

struct StatusReply
{
  std::string node;
  std::vector<JobInfo> jobs;
  CacheStats cache;
  std::uint64_t trash_entries = 0;
  std::vector<Progress> stagings; // running now
};

struct CacheEntryInfo
{
  std::string source;
  std::uint64_t bytes = 0; // on disk
  std::uint64_t files = 0;
  std::int64_t last_used = 0; // epoch seconds
  bool in_use = false;
};

struct CacheListReply
{
  std::vector<CacheEntryInfo> entries;
};

struct GcAction
{
  std::string path;
  std::string reason;
};

struct GcReply
{
  bool dry_run = false;
  std::vector<GcAction> actions;
  std::vector<std::string> errors;
};

struct RetryReply
{
  std::string said; // what was copied and removed, for people
};

struct ViewEntry
{
  std::string entry; // the hit's entry name under the cache's entries/; "" for anything else
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  stage::Placement how = stage::Placement::copied;
  CacheOutcome cache = CacheOutcome::hit; // miss: read into the cache for this job (ClaimedMisses)
  double seconds = 0;                     // that read's, and its fill's
};

struct CacheViewReply
{
  std::vector<ViewEntry> entries; // one per source
};

struct Done // a reply with no fields beyond ok
{
};

// end_job with `pending`: the daemon took the stage-out, claimed under this name. An epilog takes
// nothing less for a hand-over: a daemon older than the hand-over ignores `pending` and answers
// Done, and the results would then be copied by nobody.
struct StageOutTaken
{
  std::string claimed_as;
};

using Reply =
  std::variant<Done, StageReply, StatusReply, CacheListReply, GcReply, RetryReply, CacheViewReply, StageOutTaken>;

std::string serialize_progress(const Progress& p);
std::string serialize_result(const Reply& r);
std::string serialize_error(const Error& e);

// One frame of a reply, as the client sees it.
struct ReplyFrame
{
  std::optional<Progress> progress; // a progress frame
  std::optional<Error> error;       // a failed result
  std::string result_json;          // a successful result: the whole object (for --json output)
};
Result<ReplyFrame> parse_reply_frame(std::string_view payload);

Result<StageReply> parse_stage_reply(std::string_view json);
Result<StatusReply> parse_status_reply(std::string_view json);
Result<CacheListReply> parse_cache_list_reply(std::string_view json);
Result<GcReply> parse_gc_reply(std::string_view json);
Result<RetryReply> parse_retry_reply(std::string_view json);
Result<CacheViewReply> parse_cache_view_reply(std::string_view json);
Result<StageOutTaken> parse_stage_out_taken(std::string_view json);

} // namespace stagehand::proto
