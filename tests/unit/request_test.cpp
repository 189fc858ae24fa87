// The plugin -> helper request: every field survives request_args -> parse_request_args, and the
// markers both sides look for.
#include "stagehand/stage/bcast_marker.hpp"
#include "stagehand/stage/reach.hpp"
#include "stagehand/stage/request.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace stagehand;
using namespace stagehand::stage;

TEST(StageRequest, ArgsRoundTrip)
{
  StageRequest full;
  full.tmpdir = "/local/stagehand/node1/job_42";
  full.node = "node1";
  full.base = "/home/alice/proj with space";
  full.max_bytes = 123456789;
  full.allowed_roots = {"/datasets", "/scratch/shared"};
  full.specs = "/data/a.tar.zst:a,/data/b:b:copy";
  auto back = parse_request_args(request_args(full));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, full);

  StageRequest minimal;
  minimal.tmpdir = "/t";
  minimal.specs = "-odd-name:x"; // a raw value that looks like an option still arrives as SPECS
  back = parse_request_args(request_args(minimal));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, minimal);
  EXPECT_EQ(back->max_bytes, StageConfig{}.max_bytes);
}

TEST(StageRequest, ArgsAsTheHelperSeesThem)
{
  StageRequest r;
  r.tmpdir = "/t";
  r.node = "n1";
  r.max_bytes = 1000;
  r.specs = "/d:x";
  EXPECT_EQ(request_args(r), (std::vector<std::string>{"--tmpdir", "/t", "--node", "n1", "--max-bytes", "1000",
                                                       "--progress-interval", "30", "--", "/d:x"}));
  // With the node daemon: the job id and its socket.
  r.job_id = 42;
  r.socket = "/run/stagehand/n1.sock";
  r.progress_interval = 0;
  auto back = parse_request_args(request_args(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, r);
  // A daemon that did not answer at task start: why, so that the helper does not wait for it again.
  r.daemon_silent = "no answer from the daemon in time (reply) at task start";
  auto args = request_args(r);
  EXPECT_NE(std::find(args.begin(), args.end(), "--daemon-silent"), args.end());
  back = parse_request_args(args);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, r);
  // Each part in a broadcast survives too; a reader carries sbcast's job (or job.step) id.
  for (auto role : {BcastRole::reader, BcastRole::receiver, BcastRole::delivered}) {
    r.bcast = role;
    r.bcast_scope = role == BcastRole::reader ? "42.3" : "";
    r.bcast_nodes = "node[1-3],gpu7";
    back = parse_request_args(request_args(r));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, r);
  }
  EXPECT_FALSE(parse_request_args({"--tmpdir", "/t", "--bcast", "reader:42;rm", "/d:x"}));
  EXPECT_FALSE(parse_request_args({"--tmpdir", "/t", "--bcast", "sender", "/d:x"}));
  // The form without "--" (SPECS last) is accepted too.
  auto old_form = parse_request_args({"--tmpdir", "/t", "--max-bytes", "2K", "/d:x"});
  ASSERT_TRUE(old_form) << old_form.error().message;
  EXPECT_EQ(old_form->max_bytes, 2048U);
  EXPECT_EQ(old_form->specs, "/d:x");

  EXPECT_EQ(parse_request_args({"--tmpdir", "/t"}).error().message, "--tmpdir and SPECS are required");
  EXPECT_EQ(parse_request_args({"--tmpdir", "/t", "--frobnicate", "/d:x"}).error().message,
            "unexpected argument \"--frobnicate\"");
  EXPECT_EQ(parse_request_args({"--tmpdir", "/t", "a", "b"}).error().message, "unexpected argument \"b\"");
  EXPECT_FALSE(parse_request_args({"--tmpdir", "/t", "--max-bytes", "lots", "/d:x"}));
}

TEST(StageRequest, MarkersArePerSpecs)
{
  EXPECT_EQ(done_marker("a,b").rfind("done-", 0), 0U);
  EXPECT_EQ(failed_marker("a,b").rfind("failed-", 0), 0U);
  EXPECT_EQ(done_marker("a,b").substr(5), failed_marker("a,b").substr(7));
  EXPECT_NE(done_marker("a,b"), done_marker("a,c"));
  EXPECT_EQ(done_marker("x"), "done-" + std::string("af63f54c86021707")); // stable across versions
  // Broadcast names share the reserved prefix and differ per specs and per source.
  EXPECT_EQ(bcast_copy_name("x", 1), ".stagehand-bcast-af63f54c86021707-1");
  EXPECT_EQ(bcast_done_name("x"), ".stagehand-bcast-af63f54c86021707.done");
  EXPECT_NE(bcast_failed_name("x"), bcast_failed_name("y"));
}

// A later step's first node that staged the specs before asks whether every node of its step was
// reached by an earlier staging here, and whether the specs have file sources at all (reach.hpp):
// only then may it send nothing.
TEST(StageRequest, ReachCoversAStepOnlyWhenEveryNodeWasReached)
{
  EXPECT_EQ(reach_text(true, "node[1-2]"), "files\nnodes node[1-2]\n");
  EXPECT_EQ(reach_text(false, ""), "");
  EXPECT_EQ(reach_text(false, "a\nnodes b"), ""); // one line, never two
  const std::string alone = reach_text(true, "node1");
  EXPECT_TRUE(has_files(alone));
  EXPECT_FALSE(has_files(reach_text(false, "node1"))); // directories only: nobody ever waits
  EXPECT_TRUE(reached(alone, "node1"));
  EXPECT_FALSE(reached(alone, "node[1-2]")); // the step is wider than the staging
  const std::string both = with_reached(alone, "node[2-4]");
  EXPECT_EQ(both, "files\nnodes node1,node2,node3,node4\n"); // one line, the union
  EXPECT_EQ(with_reached(both, "node[3,1]"), both);
  EXPECT_TRUE(reached(both, "node[1-4]"));
  EXPECT_TRUE(reached(both, "node[3,1]"));
  EXPECT_FALSE(reached(both, "node[1-5]"));
  EXPECT_FALSE(reached(both, "node01")); // names, not numbers
  EXPECT_FALSE(has_files(with_reached(reach_text(false, "node1"), "node2")));
  // A marker written before these lines, an empty or bad list: nothing is known to be reached.
  EXPECT_FALSE(reached("", "node1"));
  EXPECT_FALSE(reached(both, ""));
  EXPECT_FALSE(reached(both, "node[1-"));
  EXPECT_FALSE(reached("nodes node[1-\n", "node1"));
  EXPECT_EQ(with_reached("", "node[1-2]"), "nodes node1,node2\n");
}

// A broadcast's "done" marker names each source it sent with the identity of the file sbcast read;
// a node takes a copy only for a source named so (bcast_marker.hpp).
TEST(StageRequest, ADoneMarkerNamesEachSentSourceWithItsIdentity)
{
  struct stat st {};
  st.st_ino = 77;
  st.st_size = 4096;
  st.st_mtim = {1700000000, 5};
  st.st_ctim = {1700000001, 6};
  const SentIdentity id = identity_of(st);
  EXPECT_EQ(id.size, 4096U);
  EXPECT_EQ(id.mtime_ns, 1700000000000000005);
  EXPECT_EQ(parse_identity(identity_text(id)), id);
  EXPECT_FALSE(parse_identity("4096 1"));
  EXPECT_FALSE(parse_identity("4096 1 2 3"));
  EXPECT_FALSE(parse_identity("x 1 2"));
  SentIdentity other = id;
  other.ctime_ns += 1; // rewritten with the same size and mtime put back
  EXPECT_FALSE(same_source(id, other));
  EXPECT_TRUE(same_source(id, id));
  // Another node's client of the same file: its own inode number is not compared, and times it
  // keeps at a coarser resolution (whole seconds, microseconds) match at that resolution.
  struct stat there = st;
  there.st_ino = 4242;
  EXPECT_TRUE(same_source(id, identity_of(there)));
  there.st_mtim.tv_nsec = 0;
  there.st_ctim.tv_nsec = 0;
  EXPECT_TRUE(same_source(id, identity_of(there)));
  there.st_ctim.tv_sec += 1; // a second later: changed
  EXPECT_FALSE(same_source(id, identity_of(there)));
  SentIdentity micro = id;
  micro.mtime_ns = 1700000000000123000;
  SentIdentity nano = micro;
  nano.mtime_ns += 456;
  EXPECT_TRUE(same_source(micro, nano));
  nano.mtime_ns += 1000;
  EXPECT_FALSE(same_source(micro, nano));
  SentIdentity bigger = id;
  bigger.size += 1;
  EXPECT_FALSE(same_source(id, bigger));

  const std::string text = done_text("node1", {{0, id}, {2, other}});
  EXPECT_EQ(text.substr(0, 6), "node1\n");
  const auto sent = sent_in(text);
  ASSERT_EQ(sent.size(), 2U);
  EXPECT_EQ(sent.at(0), id);
  EXPECT_EQ(sent.at(2), other);
  // Nothing sent (a reader whose cache had it all, or that staged before): no source named.
  EXPECT_TRUE(sent_in(done_text("node1", {})).empty());
  // A marker of an older reader ("sent 0 2"), or a damaged line: names nothing, so nothing is
  // taken from a copy.
  EXPECT_TRUE(sent_in("node1\nsent 0 2\n").empty());
  EXPECT_TRUE(sent_in("node1\nsource 0 4096\nsource x 1 2 3\n").empty());
}
