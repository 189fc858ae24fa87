// The daemon protocol: framing, requests as a hostile client would send them, replies.
#include "stagehand/proto/frame.hpp"
#include "stagehand/proto/messages.hpp"

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::proto;

TEST(Frame, SplitAndJoinedFeeds)
{
  const std::string two = encode_frame("{\"a\":1}") + encode_frame("xyz");
  FrameReader r(1024);
  for (char c : two) { // one byte at a time
    ASSERT_TRUE(r.feed(&c, 1));
  }
  EXPECT_EQ(r.next(), std::optional<std::string>("{\"a\":1}"));
  EXPECT_EQ(r.next(), std::optional<std::string>("xyz"));
  EXPECT_FALSE(r.next());
  EXPECT_EQ(r.pending(), 0U);
}

TEST(Frame, MissingNamesTheBytesUpToTheNextFrameNeverPast)
{
  FrameReader r(1024);
  EXPECT_EQ(r.missing(), 4U);
  const std::string two = encode_frame("hello") + encode_frame("you");
  ASSERT_TRUE(r.feed(two.data(), 2));
  EXPECT_EQ(r.missing(), 2U);
  ASSERT_TRUE(r.feed(two.data() + 2, r.missing()));
  EXPECT_EQ(r.missing(), 5U); // the payload
  ASSERT_TRUE(r.feed(two.data() + 4, r.missing()));
  EXPECT_EQ(r.missing(), 0U); // complete: read no further
  EXPECT_EQ(r.next(), "hello");
  EXPECT_EQ(r.missing(), 4U); // the next frame's header
}

TEST(Frame, OversizedIsRefusedBeforeBuffering)
{
  FrameReader r(100);
  const char header[4] = {0x7f, 0, 0, 0}; // ~2 GiB declared
  auto st = r.feed(header, 4);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().kind, ErrorKind::limit);
  EXPECT_EQ(r.pending(), 0U);
  EXPECT_FALSE(r.feed("x", 1)); // the stream stays failed
}

TEST(Request, RoundTripOfEveryOperation)
{
  Stage stage{42, {SourceSpec{"data/x", "/d/x", "data/x", stage::SourceKind::dir, stage::Unpack::never, ""}}, 1000, Misses::read};
  std::vector<Request> all = {RegisterJob{1, 1001, 1002}, EndJob{1, ".trash.job_1.3", 0, "", "", ""}, EndJob{2, "", 0, ".stageout.job_2.1.0", "out:/h/out", "/h"}, stage, StatusQuery{},
                              CacheList{}, CacheEvict{"/d/x", false}, CacheEvict{"", true}, Gc{true},
                              StageOutRetry{77}, CacheView{42, stage.sources}};
  for (const auto& r : all) {
    auto parsed = parse_request(serialize(r));
    ASSERT_TRUE(parsed) << serialize(r) << ": " << parsed.error().message;
    EXPECT_EQ(serialize(*parsed), serialize(r));
    EXPECT_STREQ(op_name(*parsed), op_name(r));
  }
  auto s = std::get<Stage>(*parse_request(serialize(stage)));
  EXPECT_EQ(s.sources[0].kind, stage::SourceKind::dir);
  EXPECT_EQ(s.sources[0].unpack, stage::Unpack::never);
  EXPECT_EQ(s.max_bytes, 1000U);
}

// A multi-node job's broadcast: hits first with misses reported, then the delivered copies.
TEST(Request, StageCarriesMissesAndDeliveredCopies)
{
  Stage stage{7, {SourceSpec{"d.tar", "/s/d.tar", "d", stage::SourceKind::file, stage::Unpack::if_archive, ".stagehand-bcast-x.0"}}, 5,
              Misses::report};
  auto text = serialize(stage);
  EXPECT_NE(text.find("\"misses\":\"report\""), std::string::npos) << text;
  auto s = std::get<Stage>(*parse_request(text));
  EXPECT_EQ(s.misses, Misses::report);
  EXPECT_EQ(s.sources[0].delivered, ".stagehand-bcast-x.0");
  EXPECT_TRUE(s.sources[0].delivered_id.empty());
  // With the identity of the file the broadcast read: carried as it is.
  stage.sources[0].delivered_id = "2048 1700000000000000001 1700000000000000002";
  EXPECT_EQ(std::get<Stage>(*parse_request(serialize(stage))).sources[0].delivered_id, stage.sources[0].delivered_id);
  // Without them (as every client before them sent): read every miss, read the source.
  Stage plain{7, {SourceSpec{"d.tar", "/s/d.tar", "d", stage::SourceKind::file, stage::Unpack::if_archive, ""}}, 5, Misses::read};
  text = serialize(plain);
  EXPECT_EQ(text.find("misses"), std::string::npos);
  EXPECT_EQ(text.find("delivered"), std::string::npos);
  s = std::get<Stage>(*parse_request(text));
  EXPECT_EQ(s.misses, Misses::read);
  EXPECT_TRUE(s.sources[0].delivered.empty());
  auto bad = parse_request(R"({"v":1,"op":"stage","job_id":1,"max_bytes":1,"misses":"skip","sources":[{"shown":"a","path":"/a","dest":"a","kind":"file","unpack":"auto"}]})");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("misses"), std::string::npos);
}

// A path that is not valid UTF-8 (legal on Linux: a directory named in Latin-1) cannot travel in
// JSON. It is an error naming the reason, never an exception: a job with such a path staged
// without the daemon, as it would with none, instead of failing because a daemon runs.
TEST(Request, APathThatIsNotUtf8IsAnErrorNotAnException)
{
  Stage stage{7, {SourceSpec{"caf\xe9.tar", "/w/caf\xe9.tar", "d", stage::SourceKind::file, stage::Unpack::if_archive, ""}},
              5, Misses::read};
  auto text = serialize_checked(Request{stage});
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().message,
            "a path or name in the request is not valid UTF-8, which the node daemon's protocol cannot carry");
  EXPECT_EQ(text.error().code, EILSEQ); // its callers say the daemon was not asked
  auto end = serialize_checked(Request{EndJob{7, "", 0, ".stageout.job_7.a", "out:/w/r\xe9s", "/w/r\xe9s"}});
  ASSERT_FALSE(end);
  stage.sources[0].path = "/w/caf\xc3\xa9.tar"; // the same name in UTF-8
  stage.sources[0].shown = "caf\xc3\xa9.tar";
  auto good = serialize_checked(Request{stage});
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(std::get<Stage>(*parse_request(*good)).sources[0].path, "/w/caf\xc3\xa9.tar");
}

// The prolog says whether the job was submitted with --stage-data; a plugin that does not (an older
// one, a Prolog= script) is taken as "yes", the daemon's behaviour before it was told.
TEST(Request, RegisterCarriesWhetherTheJobStagesData)
{
  auto text = serialize(RegisterJob{3, 1001, 1002, stage::StagingAsked::no});
  EXPECT_NE(text.find("\"stage_data\":false"), std::string::npos) << text;
  EXPECT_EQ(std::get<RegisterJob>(*parse_request(text)).staging, stage::StagingAsked::no);
  auto older = parse_request(R"({"v":1,"op":"register","job_id":3,"uid":1001,"gid":1002})");
  ASSERT_TRUE(older);
  EXPECT_EQ(std::get<RegisterJob>(*older).staging, stage::StagingAsked::yes);
  auto bad = parse_request(R"({"v":1,"op":"register","job_id":3,"uid":1001,"gid":1002,"stage_data":"no"})");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("stage_data"), std::string::npos);
}

TEST(Reply, AnAbsentSourceRoundTrips)
{
  StageReply r{{StagedSource{"d.tar", "d", stage::Placement::copied, 0, 0, 0.01, CacheOutcome::absent, ""}}};
  auto parsed = parse_stage_reply(parse_reply_frame(serialize_result(r))->result_json);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->staged[0].cache, CacheOutcome::absent);
}

TEST(Request, HostileInputIsRefusedWithTheField)
{
  auto refused = [](const std::string& text, const std::string& needle) {
    auto r = parse_request(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().kind, ErrorKind::refused);
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  };
  refused("", "not valid JSON");
  refused("\xff\xfe garbage", "not valid JSON");
  refused("[1,2]", "not a JSON object");
  refused("{\"op\":\"status\"}", "\"v\"");
  refused("{\"v\":2,\"op\":\"status\"}", "version 2");
  refused("{\"v\":1,\"op\":\"format_disk\"}", "unknown operation");
  refused("{\"v\":1,\"op\":\"register\",\"job_id\":-1,\"uid\":0,\"gid\":0}", "\"job_id\"");
  refused("{\"v\":1,\"op\":\"register\",\"job_id\":4294967296,\"uid\":0,\"gid\":0}", "out of range");
  refused("{\"v\":1,\"op\":\"register\",\"job_id\":\"1\",\"uid\":0,\"gid\":0}", "\"job_id\"");
  refused("{\"v\":1,\"op\":\"stage\",\"job_id\":1,\"max_bytes\":1,\"sources\":[]}", "\"sources\"");
  refused("{\"v\":1,\"op\":\"stage\",\"job_id\":1,\"max_bytes\":1,\"sources\":[{\"shown\":\"a\",\"path\":\"rel\","
          "\"dest\":\"a\",\"kind\":\"file\",\"unpack\":\"auto\"}]}",
          "absolute");
  refused("{\"v\":1,\"op\":\"stage\",\"job_id\":1,\"max_bytes\":1,\"sources\":[{\"shown\":\"a\",\"path\":\"/a\","
          "\"dest\":\"a\",\"kind\":\"fifo\",\"unpack\":\"auto\"}]}",
          "\"kind\"");
  refused("{\"v\":1,\"op\":\"cache_evict\",\"source\":\"" + std::string(5000, 'x') + "\"}", "too long");
  refused(std::string("{\"v\":1,\"op\":\"cache_evict\",\"source\":\"a\\u0000b\"}"), "NUL");
  auto big = parse_request(std::string(k_max_request_bytes + 1, ' '));
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().kind, ErrorKind::limit);
}

TEST(Reply, ResultsErrorsAndProgressRoundTrip)
{
  StatusReply st;
  st.node = "node1";
  st.jobs.push_back(JobInfo{7, "alice", 1001, "/local/job_7", "running"});
  st.cache = CacheStats{1, 2, 3, 4, 5, 6};
  st.trash_entries = 2;
  auto frame = parse_reply_frame(serialize_result(st));
  ASSERT_TRUE(frame);
  ASSERT_FALSE(frame->error);
  auto back = parse_status_reply(frame->result_json);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->node, "node1");
  ASSERT_EQ(back->jobs.size(), 1U);
  EXPECT_EQ(back->jobs[0].state, "running");
  EXPECT_EQ(back->cache.evictions, 6U);
  EXPECT_EQ(back->trash_entries, 2U);

  // end_job's answer to a stage-out hand-over names what the daemon claimed; a plain "done" does not.
  auto taken = parse_reply_frame(serialize_result(StageOutTaken{".stageout.job_7.9.1"}));
  ASSERT_TRUE(taken && !taken->error);
  auto claimed = parse_stage_out_taken(taken->result_json);
  ASSERT_TRUE(claimed) << claimed.error().message;
  EXPECT_EQ(claimed->claimed_as, ".stageout.job_7.9.1");
  auto done = parse_reply_frame(serialize_result(Done{}));
  ASSERT_TRUE(done && !done->error);
  EXPECT_FALSE(parse_stage_out_taken(done->result_json));

  auto err = parse_reply_frame(serialize_error(Error::limit("too big")));
  ASSERT_TRUE(err && err->error);
  EXPECT_EQ(err->error->kind, ErrorKind::limit);
  EXPECT_EQ(err->error->message, "too big");

  auto prog = parse_reply_frame(serialize_progress(Progress{"a.tar", 5, 10, 1.5}));
  ASSERT_TRUE(prog && prog->progress);
  EXPECT_EQ(prog->progress->done_bytes, 5U);

  StageReply sr;
  sr.staged.push_back(StagedSource{"a.tar", "a", stage::Placement::unpacked, 3, 30, 0.5, CacheOutcome::hit, ""});
  auto sr_back = parse_stage_reply(parse_reply_frame(serialize_result(sr))->result_json);
  ASSERT_TRUE(sr_back);
  EXPECT_EQ(sr_back->staged[0].cache, CacheOutcome::hit);

  CacheListReply cl;
  cl.entries.push_back(CacheEntryInfo{"/d/a.tar", 4096, 3, 1700000000, true});
  auto cl_back = parse_cache_list_reply(parse_reply_frame(serialize_result(cl))->result_json);
  ASSERT_TRUE(cl_back);
  EXPECT_TRUE(cl_back->entries[0].in_use);
  // Invalid UTF-8 in a message (a file name) never breaks the reply.
  auto odd = parse_reply_frame(serialize_error(Error::refused("bad name \xff\xfe")));
  ASSERT_TRUE(odd && odd->error);
}

TEST(Proto, CacheViewRoundTripAndReply)
{
  using namespace stagehand::proto;
  auto parsed = parse_request(R"({"v":1,"op":"cache_view","job_id":9,"sources":[{"shown":"a.tar","path":"/d/a.tar","dest":"a","kind":"file","unpack":"auto"}]})");
  ASSERT_TRUE(parsed) << parsed.error().message;
  const auto& v = std::get<CacheView>(*parsed);
  EXPECT_EQ(v.job_id, 9U);
  ASSERT_EQ(v.sources.size(), 1U);
  EXPECT_EQ(v.sources[0].dest, "a");
  EXPECT_FALSE(parse_request(R"({"v":1,"op":"cache_view","job_id":9,"sources":[]})")); // at least one source
  auto reply = parse_cache_view_reply(
    R"({"v":1,"type":"result","ok":true,"entries":[{"entry":"abc","files":3,"bytes":9,"how":"unpacked"},{"entry":"","files":0,"bytes":0,"how":""}]})");
  ASSERT_TRUE(reply) << reply.error().message;
  ASSERT_EQ(reply->entries.size(), 2U);
  EXPECT_EQ(reply->entries[0].entry, "abc");
  EXPECT_EQ(reply->entries[0].files, 3U);
  EXPECT_EQ(reply->entries[0].bytes, 9U);
  EXPECT_EQ(reply->entries[0].how, stage::Placement::unpacked);
  EXPECT_EQ(reply->entries[1].entry, "");
  EXPECT_FALSE(parse_cache_view_reply(R"({"entries":["abc"]})"));
  EXPECT_FALSE(parse_cache_view_reply(R"({"entries":[{"entry":"abc"}]})"));
  EXPECT_FALSE(parse_cache_view_reply(R"({"v":1})"));
  auto frame = parse_reply_frame(serialize_result(CacheViewReply{{ViewEntry{"k1", 1, 2, stage::Placement::copied}, ViewEntry{}}}));
  ASSERT_TRUE(frame);
  auto back = parse_cache_view_reply(frame->result_json);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->entries[0].entry, "k1");
  EXPECT_EQ(back->entries[1].entry, "");
  EXPECT_EQ(back->entries[0].cache, CacheOutcome::hit); // a daemon without "cache" answered hits only
  EXPECT_EQ(v.claimed, ClaimedMisses::staged);            // and a plugin without "read_claimed" stages its misses

  // A claimed miss read into the cache for the job's view: asked for, and said so with its seconds.
  auto asked =
    parse_request(serialize(Request{CacheView{9, v.sources, ClaimedMisses::read_for_view, std::chrono::seconds(30)}}));
  ASSERT_TRUE(asked) << asked.error().message;
  EXPECT_EQ(std::get<CacheView>(*asked).claimed, ClaimedMisses::read_for_view);
  EXPECT_EQ(std::get<CacheView>(*asked).progress_interval, std::chrono::seconds(30));
  ViewEntry read{"k2", 60000, 7, stage::Placement::unpacked, CacheOutcome::miss, 0.634};
  auto read_frame = parse_reply_frame(serialize_result(CacheViewReply{{read}}));
  ASSERT_TRUE(read_frame);
  auto read_back = parse_cache_view_reply(read_frame->result_json);
  ASSERT_TRUE(read_back) << read_back.error().message;
  EXPECT_EQ(read_back->entries[0].cache, CacheOutcome::miss);
  EXPECT_DOUBLE_EQ(read_back->entries[0].seconds, 0.634);
  EXPECT_FALSE(parse_cache_view_reply(R"({"entries":[{"entry":"a","files":1,"bytes":1,"how":"","cache":"none"}]})"));
  EXPECT_FALSE(parse_cache_view_reply(R"({"entries":[{"entry":"a","files":1,"bytes":1,"how":"","seconds":-1}]})"));
}
