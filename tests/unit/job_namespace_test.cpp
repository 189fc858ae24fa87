// Slurm's per-job private directories (namespace/tmpfs) and [tmpdir] base: which Dirs a node's
// config makes private, and whether they hide the base.
#include "stagehand/tmpdir/job_namespace.hpp"

#include <gtest/gtest.h>

namespace stagehand::tmpdir {
namespace {

using Dirs = std::vector<std::string>;

TEST(JobNamespace, ConfigValuesAreReadAsSlurmReadsThem)
{
  const char* conf = "# NamespaceType=namespace/linux\n"
                     "ClusterName=c  # a comment\n"
                     "namespacetype=namespace/tmpfs\n"
                     "NodeName=n1 BasePath=/var/ns Dirs=\"/tmp,/scratch\"\n";
  EXPECT_EQ(slurm_conf_value(conf, "NamespaceType"), "namespace/tmpfs");
  EXPECT_EQ(slurm_conf_value(conf, "Dirs"), "/tmp,/scratch");
  EXPECT_EQ(slurm_conf_value(conf, "BasePath"), "/var/ns");
  EXPECT_EQ(slurm_conf_value(conf, "ProctrackType"), std::nullopt);
  EXPECT_EQ(slurm_conf_value("A=1\nA=2\n", "a"), "2"); // the last one, as Slurm
}

TEST(JobNamespace, PrivateDirsOnlyWithTheTmpfsPlugin)
{
  EXPECT_EQ(private_job_dirs("NamespaceType=namespace/tmpfs\n", ""), (Dirs{"/tmp", "/dev/shm"}));
  EXPECT_EQ(private_job_dirs("JobContainerType=job_container/tmpfs\n", "BasePath=/ns\nDirs=/tmp,/var/tmp\n"),
            (Dirs{"/tmp", "/var/tmp"}));
  EXPECT_EQ(private_job_dirs("NamespaceType=namespace/linux\n", "Dirs=/tmp\n"), Dirs{});
  EXPECT_EQ(private_job_dirs("JobContainerType=job_container/none\n", ""), Dirs{});
  EXPECT_EQ(private_job_dirs("ClusterName=c\n", "Dirs=/tmp\n"), Dirs{});
}

TEST(JobNamespace, ABaseInsideAPrivateDirIsHidden)
{
  const Dirs dirs{"/tmp", "/dev/shm/"};
  EXPECT_EQ(dir_hiding_base("/tmp/stagehand", dirs), "/tmp");
  EXPECT_EQ(dir_hiding_base("/tmp", dirs), "/tmp");
  EXPECT_EQ(dir_hiding_base("/dev/shm/stagehand/%n", dirs), "/dev/shm/");
  EXPECT_EQ(dir_hiding_base("/tmp/%n/stagehand", dirs), "/tmp");
  // Beside them: the default, a name that only starts like one, a %n component next to /tmp.
  EXPECT_EQ(dir_hiding_base("/local/stagehand", dirs), std::nullopt);
  EXPECT_EQ(dir_hiding_base("/tmpfs/stagehand", dirs), std::nullopt);
  EXPECT_EQ(dir_hiding_base("/tmp%n", dirs), std::nullopt);
  EXPECT_EQ(dir_hiding_base("/local/stagehand", Dirs{"relative", ""}), std::nullopt);
  EXPECT_EQ(hidden_base_message("/tmp/stagehand", "/tmp"),
            "[tmpdir] base \"/tmp/stagehand\" lies in /tmp, which Slurm's namespace/tmpfs makes private to each job "
            "(job_container.conf Dirs): jobs cannot see their directories there; set base outside Dirs (beside "
            "them, e.g. /local/stagehand)");
}

} // namespace
} // namespace stagehand::tmpdir
