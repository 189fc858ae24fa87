// Cache views' record (tmpdir/views.hpp): what root writes for the job's tasks, and the removal
// of a job's view directory.
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace stagehand;
using namespace stagehand::tmpdir;

TEST(ViewRecord, RoundTrips)
{
  const std::vector<View> views = {{"imagenet", 60000, 123456789, stage::Placement::unpacked}, {"a b", 1, 0, stage::Placement::copied},
                                   {"x:y,z 1 2", 3, 4, stage::Placement::unpacked}};
  auto text = format_view_record({views, ""});
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "view 60000 123456789 unpacked imagenet\nview 1 0 copied a b\nview 3 4 unpacked x:y,z 1 2\n");
  auto back = parse_view_record(*text);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->views, views);
  EXPECT_EQ(back->daemon_silent, "");
  auto line = view_line(views[0]);
  ASSERT_TRUE(line);
  EXPECT_EQ(*parse_view_line(*line), views[0]); // the helper's --view value
  // A source read into the cache for this job at task start: its milliseconds, for its summary line.
  View read{"imagenet", 60000, 123456789, stage::Placement::unpacked, ViewOrigin::read, 634};
  auto read_line = view_line(read);
  ASSERT_TRUE(read_line);
  EXPECT_EQ(*read_line, "60000 123456789 unpacked,read=634 imagenet");
  EXPECT_EQ(*parse_view_line(*read_line), read);
  EXPECT_EQ(parse_view_line("1 1 unpacked a")->origin, ViewOrigin::hit); // a line before reads were shown
  EXPECT_FALSE(parse_view_line("1 1 unpacked,read= a"));
  EXPECT_FALSE(parse_view_line("1 1 unpacked,reap=5 a"));
  EXPECT_FALSE(parse_view_line("1 1 unpacked,read=5x a"));
  EXPECT_NE(view_summary(read, "/shared/imagenet.tar", "/tmp/job").find("(cache miss)"), std::string::npos);
  EXPECT_NE(view_summary(read, "/shared/imagenet.tar", "/tmp/job").find("0.63 s"), std::string::npos)
    << view_summary(read, "/shared/imagenet.tar", "/tmp/job");
  EXPECT_NE(view_summary(views[0], "/shared/imagenet.tar", "/tmp/job").find("(cache hit)"), std::string::npos);
  auto empty = parse_view_record(*format_view_record({}));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->views.empty());
}

// A daemon that did not answer at task start: the record says why, for the job's other tasks too
// (their staging helper then does not wait for it again); a control character cannot forge a line.
TEST(ViewRecord, SaysWhyTheDaemonWasSilent)
{
  const ViewRecord silent{{}, "no answer from the daemon in time (reply) at task start"};
  auto text = format_view_record(silent);
  ASSERT_TRUE(text) << text.error().message;
  EXPECT_EQ(*text, "silent no answer from the daemon in time (reply) at task start\n");
  EXPECT_EQ(*parse_view_record(*text), silent);
  auto forged = format_view_record({{}, "x\nview 1 1 unpacked b"});
  ASSERT_TRUE(forged);
  EXPECT_EQ(*forged, "silent x?view 1 1 unpacked b\n");
  EXPECT_TRUE(parse_view_record(*forged)->views.empty());
  EXPECT_FALSE(parse_view_record("silent a\nview 1 1 unpacked b\n")); // the last line only
  EXPECT_FALSE(parse_view_record("silent a\nsilent b\n"));
  EXPECT_FALSE(parse_view_record("silent \n"));
}

TEST(ViewRecord, RefusesWhatItCannotWriteOrRead)
{
  // A destination that would forge a line, and an empty one.
  EXPECT_FALSE(format_view_record({{View{"a\nview 1 1 unpacked b", 1, 1, stage::Placement::unpacked}}, ""}));
  EXPECT_FALSE(format_view_record({{View{"", 1, 1, stage::Placement::unpacked}}, ""}));
  EXPECT_FALSE(parse_view_record("view 1 1 linked a\n")); // another HOW
  EXPECT_FALSE(parse_view_record("view 1 1 unpacked a"));   // cut
  EXPECT_FALSE(parse_view_record("link 1 1 unpacked a\n")); // not a view line
  EXPECT_FALSE(parse_view_record("view 1 1 unpacked \n"));
  EXPECT_FALSE(parse_view_record("view 1 1 unpacked a\x01\n"));
  EXPECT_FALSE(parse_view_line("x 1 unpacked a"));
  EXPECT_FALSE(parse_view_line("1 -1 unpacked a"));
  EXPECT_FALSE(parse_view_line("1 1 unpacked"));
}

TEST(ViewRecord, JobNames)
{
  EXPECT_EQ(job_views_name(42), "job_42");
  EXPECT_EQ(job_of_views_name("job_42"), 42U);
  EXPECT_EQ(job_of_views_name("job_"), 0U);
  EXPECT_EQ(job_of_views_name("job_042"), 0U);
  EXPECT_EQ(job_of_views_name("job_4x"), 0U);
  EXPECT_EQ(job_of_views_name("probe"), 0U);
  EXPECT_EQ(job_of_views_name("job_99999999999"), 0U);
}

TEST(ViewRecord, RemoveJobViews)
{
  stagehand::test::TempDir d;
  UniqueFd base(::open(d.path().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(base.valid());
  EXPECT_TRUE(remove_job_views(base.get(), 7)); // nothing there
  ASSERT_EQ(::mkdirat(base.get(), ".views", 0700), 0);
  ASSERT_EQ(::mkdirat(base.get(), ".views/job_7", 0700), 0);
  ASSERT_EQ(::mkdirat(base.get(), ".views/job_7/0", 0700), 0);
  ASSERT_EQ(::mkdirat(base.get(), ".views/job_8", 0700), 0);
  EXPECT_TRUE(remove_job_views(base.get(), 7));
  struct stat st {};
  EXPECT_NE(::fstatat(base.get(), ".views/job_7", &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_EQ(::fstatat(base.get(), ".views/job_8", &st, AT_SYMLINK_NOFOLLOW), 0); // another job's stays
}

// A staging whose every source root showed as a view (the plugin's task_init writes these lines
// and starts no helper): the lines the helper prints for a hit, in the order of the specs.
TEST(ViewsOnly, EverySourceAViewGivesTheHelpersSummaryLines)
{
  const std::string specs = "/data/imagenet.tar.zst:imagenet.tar.zst:auto,/data/shards:s";
  const std::vector<View> views = {{"s", 16, 1073741824, stage::Placement::copied},
                                   {"imagenet", 60000, 123456789, stage::Placement::unpacked}};
  auto lines = views_only_summaries(specs, views, "/scratch/job_7");
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 2U);
  EXPECT_EQ((*lines)[0], "unpacked /data/imagenet.tar.zst -> /scratch/job_7/imagenet: 60000 files, 117.7 MiB in "
                         "0.00 s, shown as your own files (cache view) (cache hit)");
  EXPECT_EQ((*lines)[1], "copied /data/shards -> /scratch/job_7/s: 16 files, 1.0 GiB in 0.00 s, "
                         "shown as your own files (cache view) (cache hit)");
  EXPECT_EQ((*lines)[1], view_summary(views[0], "/data/shards", "/scratch/job_7")); // the helper's for a hit
}

TEST(ViewsOnly, ASourceNotShownAsAViewLeavesTheStagingToTheHelper)
{
  const std::vector<View> views = {{"imagenet", 60000, 123456789, stage::Placement::unpacked}};
  EXPECT_TRUE(views_only_summaries("/data/imagenet.tar.zst:imagenet", views, "/t"));
  EXPECT_FALSE(views_only_summaries("/data/imagenet.tar.zst:imagenet,/data/b.bin:b.bin", views, "/t")); // b: no view
  EXPECT_FALSE(views_only_summaries("/data/imagenet.tar.zst:imagenet:copy", views, "/t")); // never a view
  EXPECT_FALSE(views_only_summaries("/data/imagenet.tar.zst:sub/imagenet", views, "/t")); // not one name
  EXPECT_FALSE(views_only_summaries("data/imagenet.tar.zst:imagenet", views, "/t"));      // not canonical
  EXPECT_FALSE(views_only_summaries("/data/imagenet.tar.zst:imagenet", {}, "/t"));
  EXPECT_FALSE(views_only_summaries("", views, "/t"));
  EXPECT_FALSE(views_only_summaries("/data/a.tar:imagenet:bogus", views, "/t"));
}
