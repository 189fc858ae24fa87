// Host list expansion: the forms Slurm prints, and a differential test against the libslurm this
// test is built with (22.05 or a current release; see k_slurm_has_suffix_grammar).
#include "stagehand/ddp/hostlist.hpp"

#include <gtest/gtest.h>

extern "C" {
#include <slurm/slurm.h>
}

#include <cstdio>
#include <iostream>
#include <random>

using stagehand::ddp::expand_hostlist;
using stagehand::ddp::first_host;
using V = std::vector<std::string>;

namespace {

// Slurm 23.11 made hostlist_t a struct type (handles became hostlist_t *); CMake detects which.
#ifdef STAGEHAND_SLURM_HOSTLIST_T_IS_POINTER
using SlurmHostlist = hostlist_t;
#else
using SlurmHostlist = hostlist_t*;
#endif

// Since 23.11 libslurm accepts text after the last ']' ("x[3-4]-y" is x3-y, x4-y); 22.05 refuses
// it. stagehand always follows the newer grammar (src/stagehand/ddp/hostlist.hpp says why).
constexpr bool k_slurm_has_suffix_grammar = SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0);

std::string slurm_version()
{
  char s[32];
  std::snprintf(s, sizeof s, "%d.%02d.%d", SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER),
                SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER));
  return s;
}

// libslurm's own expansion, the reference.
std::optional<V> slurm_expand(const std::string& list)
{
  SlurmHostlist hl = slurm_hostlist_create(list.c_str());
  if (!hl) {
    return std::nullopt;
  }
  V out;
  while (char* h = slurm_hostlist_shift(hl)) {
    out.emplace_back(h);
    free(h);
  }
  slurm_hostlist_destroy(hl);
  return out;
}

const std::vector<std::string> k_hard_cases = {
  "node1",
  "node[1-3]",
  "node[01-03]",
  "node[8-11]",
  "node[08-11]",
  "node[001-003,010,099-101]",
  "gpu[1-2],login1,cpu[07-08]",
  "rack[1-2]-n[01-02]",
  "a[1-2]b[3-4]c[5-6]",
  "dash-name-[1-2]",
  "x-1-[3-4]",
  "n[1,3,5-6]",
  "n[0-0]",
  "n1,n1,n2",
  "node[1-3],node2",
  "z[9-10]",
  "big[1-1000]",
  "dot.name[1-2]",
  "a[1-2]b[3-4]c[5-6]d[7-8]",
  "n[1-03]",
  "[1-2]",
  "n[1-2],,m",
  "under_score[1-2]",
  "n[00-02],m[0-2]",
};

// Lists with text after the last ']' and what the newer grammar makes of them.
const std::vector<std::pair<std::string, V>> k_suffix_cases = {
  {"x[3-4]-y", {"x3-y", "x4-y"}},
  {"kg[1-2]9", {"kg19", "kg29"}},
  {"n[1-2]x,m", {"n1x", "n2x", "m"}},
  {"a[1-2]b[3-4]9", {"a1b39", "a1b49", "a2b39", "a2b49"}},
  {"r[1-2]-n[01-02].ib", {"r1-n01.ib", "r1-n02.ib", "r2-n01.ib", "r2-n02.ib"}},
};

// True when an expression of `list` has text after its last bracket group: the one place where
// the libslurm releases differ.
bool has_text_after_group(std::string_view list)
{
  int depth = 0;
  bool seen_group = false;
  bool text_since_group = false;
  for (char c : list) {
    if (c == '[') {
      ++depth;
      text_since_group = false;
    } else if (c == ']') {
      --depth;
      seen_group = true;
      text_since_group = false;
    } else if (c == ',' && depth == 0) {
      if (seen_group && text_since_group) {
        return true;
      }
      seen_group = text_since_group = false;
    } else if (depth == 0) {
      text_since_group = seen_group;
    }
  }
  return seen_group && text_since_group;
}

} // namespace

TEST(Hostlist, FormsSlurmPrints)
{
  EXPECT_EQ(*expand_hostlist("node1"), (V{"node1"}));
  EXPECT_EQ(*expand_hostlist("node[1-3]"), (V{"node1", "node2", "node3"}));
  EXPECT_EQ(*expand_hostlist("node[08-11]"), (V{"node08", "node09", "node10", "node11"}));
  EXPECT_EQ(*expand_hostlist("node[8-11]"), (V{"node8", "node9", "node10", "node11"}));
  EXPECT_EQ(*expand_hostlist("gpu[1-2],login1"), (V{"gpu1", "gpu2", "login1"}));
  EXPECT_EQ(*expand_hostlist("n[1,3,5-6]"), (V{"n1", "n3", "n5", "n6"}));
  EXPECT_EQ(*expand_hostlist("rack[1-2]-n[01-02]"), (V{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(*expand_hostlist("dash-name-[1-2]"), (V{"dash-name-1", "dash-name-2"}));
  EXPECT_EQ(*first_host("node[07-09],login"), "node07");
  EXPECT_EQ(*first_host("login,node[07-09]"), "login");
}

TEST(Hostlist, RejectsMalformedLists)
{
  for (const char* bad : {"", "node[1-", "node]1[", "node[a-b]", "node[3-1]", "node[[1-2]]", "node[]", "n[1-2", "a b",
                          "n[1-2-3]", "n[-1]"}) {
    auto r = expand_hostlist(bad);
    EXPECT_FALSE(r) << "accepted \"" << bad << "\"";
    if (!r) {
      EXPECT_NE(r.error().message.find("bad host list"), std::string::npos);
    }
  }
}

TEST(Hostlist, RefusesExpansionBombs)
{
  auto r = expand_hostlist("n[1-999999999]");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("more than"), std::string::npos);
  EXPECT_FALSE(expand_hostlist("a[1-2000]b[1-2000]"));
}

TEST(HostlistVsSlurm, HardCasesMatchLibslurm)
{
  for (const auto& list : k_hard_cases) {
    auto ours = expand_hostlist(list);
    auto theirs = slurm_expand(list);
    ASSERT_TRUE(ours) << list << ": " << ours.error().message;
    ASSERT_TRUE(theirs) << list;
    EXPECT_EQ(*ours, *theirs) << list;
  }
  // Lists Slurm refuses are refused here too.
  for (const char* list : {"n[5-3]", "n[a]", "n[1-2-3]", "n[]"}) {
    EXPECT_FALSE(slurm_expand(list)) << list;
    EXPECT_FALSE(expand_hostlist(list)) << list;
  }
  // A deliberate difference: since 23.11 libslurm takes a stray ']' after a group as text
  // ("n[1-2]]" is n1], n2]); no host name holds a ']', so stagehand refuses the list.
  EXPECT_FALSE(expand_hostlist("n[1-2]]"));
  EXPECT_EQ(slurm_expand("n[1-2]]").has_value(), k_slurm_has_suffix_grammar);
}

TEST(HostlistVsSlurm, TextAfterTheLastGroup)
{
  for (const auto& [list, expected] : k_suffix_cases) {
    ASSERT_TRUE(has_text_after_group(list)) << list;
    auto ours = expand_hostlist(list);
    ASSERT_TRUE(ours) << list << ": " << ours.error().message;
    EXPECT_EQ(*ours, expected) << list;
    auto theirs = slurm_expand(list);
    if (k_slurm_has_suffix_grammar) {
      ASSERT_TRUE(theirs) << list;
      EXPECT_EQ(*theirs, expected) << list;
    } else {
      EXPECT_FALSE(theirs) << list << ": libslurm " << slurm_version() << " accepted it";
    }
  }
  EXPECT_FALSE(has_text_after_group("rack[1-2]-n[01-02],login1"));
  EXPECT_TRUE(has_text_after_group("rack[1-2]-n[01-02]x,login1"));
}

// 10,000 random node lists in the grammar Slurm prints, expanded by both.
TEST(HostlistVsSlurm, TenThousandGeneratedLists)
{
  std::mt19937 rng(20261122);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const std::string letters = "abcdefghijklmnopqrstuvwxyz";
  auto name = [&] {
    std::string s;
    int len = 1 + pick(6);
    for (int i = 0; i < len; ++i) {
      s += letters[static_cast<std::size_t>(pick(26))];
    }
    if (pick(4) == 0) {
      s += "-";
    }
    return s;
  };
  auto number = [&](int width) {
    std::string s = std::to_string(pick(200));
    while (static_cast<int>(s.size()) < width) {
      s.insert(0, "0");
    }
    return s;
  };
  int compared = 0;
  int accepted = 0;
  int older_grammar = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    std::string list;
    int exprs = 1 + pick(3);
    for (int e = 0; e < exprs; ++e) {
      if (e) {
        list += ",";
      }
      list += name();
      int groups = pick(10) < 7 ? 1 : (pick(2) ? 0 : 2 + pick(2));
      for (int g = 0; g < groups; ++g) {
        if (g) {
          list += "-" + name();
        }
        int width = pick(3) == 0 ? 3 : (pick(2) ? 2 : 0);
        list += "[";
        int items = 1 + pick(3);
        for (int it = 0; it < items; ++it) {
          if (it) {
            list += ",";
          }
          std::string lo = number(width);
          if (pick(3)) {
            int lo_n = std::stoi(lo);
            std::string hi = std::to_string(lo_n + pick(12));
            while (hi.size() < lo.size()) {
              hi.insert(0, "0");
            }
            list += lo + "-" + hi;
          } else {
            list += lo;
          }
        }
        list += "]";
      }
      if (pick(20) == 0) {
        list += pick(2) ? std::to_string(pick(10)) : "-" + name(); // text after the last group
      }
    }
    auto ours = expand_hostlist(list);
    auto theirs = slurm_expand(list);
    // The one known difference: a libslurm before 23.11 refuses text after the last group, which
    // stagehand accepts. Only those lists are left out, and they are counted.
    if (!k_slurm_has_suffix_grammar && ours && !theirs && has_text_after_group(list)) {
      ++older_grammar;
      continue;
    }
    ASSERT_EQ(ours.ok(), theirs.has_value()) << list << (ours ? "" : ": " + ours.error().message);
    if (theirs) {
      ASSERT_EQ(*ours, *theirs) << list;
      ++accepted;
    }
    ++compared;
  }
  std::cout << "hostlist: libslurm " << slurm_version() << ": " << compared << " lists compared, " << accepted
            << " accepted by both; " << older_grammar
            << " with text after the last ']' left out (refused before Slurm 23.11, accepted here)\n";
  EXPECT_EQ(compared + older_grammar, 10000);
  EXPECT_GT(accepted, 7000); // most generated lists are valid, so expansions really are compared
  if (k_slurm_has_suffix_grammar) {
    EXPECT_EQ(older_grammar, 0);
  } else {
    EXPECT_GT(older_grammar, 300); // the generator does produce them, and they are ~8%, not a blanket skip
    EXPECT_LT(older_grammar, 1500);
  }
}
