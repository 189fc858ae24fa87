// What stagehandd's children say to it: every message round-trips, a failure keeps its kind, errno
// and sentence, and anything else a (user-side, so untrusted) child could send is an error that
// says so, never an exception.
#include "stagehand/proto/child_messages.hpp"

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::proto;

TEST(ChildMessages, EachRoundTrips)
{
  const SourceIdentified id{"ab12", 3, 4096, 1700000000123456789, true, true};
  EXPECT_EQ(parse_child_message<SourceIdentified>(child_message(id)).value(), id);
  const SourceIdentified dir{"ef56", 16, 1ULL << 30, 5, false, false, true};
  EXPECT_EQ(parse_child_message<SourceIdentified>(child_message(dir)).value(), dir);
  const TreeStreamed tree{"cd34", true, -5, "", 0, 0};
  EXPECT_EQ(parse_child_message<TreeStreamed>(child_message(tree)).value(), tree);
  const TreeStreamed copied_tree{"cd35",  false,   7, "the stream to the cache stopped: Broken pipe", 16, 1ULL << 30,
                                 {"data", 2049, 1ULL << 40}};
  EXPECT_EQ(parse_child_message<TreeStreamed>(child_message(copied_tree)).value(), copied_tree);
  const Teed teed{1ULL << 40, "the cache could not keep up"};
  EXPECT_EQ(parse_child_message<Teed>(child_message(teed)).value(), teed);
  const stage::Placed placed{stage::Placement::unpacked, 60000, 123456789};
  EXPECT_EQ(parse_child_message<stage::Placed>(child_message(placed)).value(), placed);
  const stage::Placed copied{stage::Placement::copied, 1, 0, {"data/x.bin", 64768, 12345}};
  EXPECT_EQ(parse_child_message<stage::Placed>(child_message(copied)).value(), copied);
}

TEST(ChildMessages, AFailureKeepsKindCodeAndSentence)
{
  Error e = Error::limit("data/x: more than 1000 bytes (limit)");
  e.code = EFBIG;
  auto back = parse_child_message<stage::Placed>(child_failure(e));
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().kind, ErrorKind::limit);
  EXPECT_EQ(back.error().code, EFBIG);
  EXPECT_EQ(back.error().message, "data/x: more than 1000 bytes (limit)");
  // Bytes that are not UTF-8 (a file name) are replaced, not an exception.
  auto odd = parse_child_message<Teed>(child_failure(Error::io("bad \xff name", EIO)));
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().kind, ErrorKind::io);
  EXPECT_NE(odd.error().message.find("bad "), std::string::npos);
}

TEST(ChildMessages, WhatIsNotAMessageIsRefusedByName)
{
  auto garbage = [](const std::string& text) {
    auto r = parse_child_message<stage::Placed>(text);
    return r ? std::string("accepted") : r.error().message;
  };
  EXPECT_EQ(garbage("not json"), "a staging child sent garbage");
  EXPECT_EQ(garbage("[1]"), "a staging child sent garbage");
  EXPECT_EQ(garbage(R"({"ok":"yes"})"), "a staging child sent garbage: protocol: \"ok\" must be true or false");
  EXPECT_EQ(garbage(R"({"ok":true,"how":"copied","files":1})"),
            "a staging child sent garbage: protocol: \"bytes\" must be a non-negative integer");
  EXPECT_EQ(garbage(R"({"ok":true,"how":"linked","files":1,"bytes":1})"),
            "a staging child sent garbage: \"how\" must be \"copied\" or \"unpacked\"");
  EXPECT_EQ(garbage(R"({"ok":true,"how":"copied","files":-1,"bytes":1})"),
            "a staging child sent garbage: protocol: \"files\" must be a non-negative integer");
  EXPECT_EQ(garbage(R"({"ok":false})"), "a staging child failed");
  auto no_key = parse_child_message<SourceIdentified>(R"({"ok":true,"files":1,"bytes":1,"newest_ns":0})");
  ASSERT_FALSE(no_key);
  EXPECT_EQ(no_key.error().message, "a staging child sent garbage: protocol: \"key\" must be a string");
  // A tree stream that does not say whether it changed counts as changed (never cached).
  auto unsaid = parse_child_message<TreeStreamed>(R"({"ok":true,"key":"k","newest_ns":0,"dropped":"","files":0,"bytes":0})");
  ASSERT_TRUE(unsaid);
  EXPECT_TRUE(unsaid->changed);
  // Nor what it created: nothing is recorded, so a rollback removes nothing of it.
  EXPECT_TRUE(unsaid->created.rel.empty());
  EXPECT_EQ(garbage(R"({"ok":true,"how":"copied","files":1,"bytes":1,"created":"data"})"),
            "a staging child sent garbage: protocol: \"created\" must be an object");
  EXPECT_EQ(garbage(R"({"ok":true,"how":"copied","files":1,"bytes":1,"created":{"rel":"d","dev":1}})"),
            "a staging child sent garbage: protocol: \"ino\" must be a non-negative integer");
}
