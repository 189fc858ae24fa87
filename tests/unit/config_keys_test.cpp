// Every key the loader accepts is documented in stagehand.toml(5) and set in the shipped example,
// and the other way round. The loader's list is k_config_keys, which the parser itself enforces.
#include "stagehand/config/config.hpp"
#include "stagehand/config/keys.hpp"

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

using namespace stagehand;

namespace {

using KeySet = std::set<std::pair<std::string, std::string>>;

const std::string k_man_source = STAGEHAND_SOURCE_DIR "/docs/man/stagehand.toml.5.scd";
const std::string k_example = STAGEHAND_SOURCE_DIR "/conf/stagehand.toml";

std::string read_file(const std::string& path)
{
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

KeySet loader_keys()
{
  KeySet keys;
  for (const auto& k : k_config_keys) {
    keys.emplace(k.table, k.key);
  }
  return keys;
}

// The man page documents a table as a section "# [table]" (or "# [table.sub]", the key "sub" of
// "table") and a key as a paragraph starting "*key* = " inside its table's section.
KeySet documented_keys(const std::string& scd)
{
  static const std::regex section(R"(^# \[([a-z_]+)(?:\.([a-z_]+))?\]$)");
  static const std::regex other_section(R"(^# .*)");
  static const std::regex key(R"(^\*([a-z_]+)\* = )");
  KeySet keys;
  std::string table;
  bool in_table = false;
  std::istringstream lines(scd);
  std::smatch m;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, m, section)) {
      if (m[2].matched) {
        keys.emplace(m[1], m[2]);
        table = m[1].str() + "." + m[2].str();
      } else {
        keys.emplace("", m[1]);
        table = m[1];
      }
      in_table = true;
    } else if (std::regex_match(line, other_section)) {
      in_table = false;
    } else if (std::regex_search(line, m, key)) {
      EXPECT_TRUE(in_table) << "*" << m[1] << "* documented outside a [table] section";
      keys.emplace(table, m[1]);
    }
  }
  return keys;
}

// The example's keys, by toml++ (a commented-out line is no key). [ddp.env]'s own keys are free
// names, not configuration keys.
KeySet example_keys(const toml::table& root)
{
  KeySet keys;
  for (auto&& [name, node] : root) {
    keys.emplace("", name.str());
    if (const auto* tbl = node.as_table()) {
      for (auto&& [key, value] : *tbl) {
        keys.emplace(std::string(name.str()), std::string(key.str()));
      }
    }
  }
  return keys;
}

std::string describe(const KeySet& keys)
{
  std::string s;
  for (const auto& [table, key] : keys) {
    s += (table.empty() ? "[" + key + "]" : "[" + table + "] " + key) + "; ";
  }
  return s.empty() ? "(none)" : s;
}

KeySet minus(const KeySet& a, const KeySet& b)
{
  KeySet out;
  for (const auto& k : a) {
    if (!b.count(k)) {
      out.insert(k);
    }
  }
  return out;
}

// Both ways: every loader key is in `other` (read from `where`), and nothing else is.
void expect_same_keys(const KeySet& other, const std::string& where)
{
  const KeySet loader = loader_keys();
  EXPECT_EQ(minus(loader, other), KeySet{}) << "accepted by the loader, missing in " << where << ": "
                                            << describe(minus(loader, other));
  EXPECT_EQ(minus(other, loader), KeySet{}) << "in " << where << ", but the loader refuses it: "
                                            << describe(minus(other, loader));
}

} // namespace

TEST(ConfigKeys, ManPageDocumentsExactlyTheLoadersKeys)
{
  const KeySet documented = documented_keys(read_file(k_man_source));
  EXPECT_GT(documented.size(), 20U) << "the man page parser found almost nothing: has the page's layout changed?";
  expect_same_keys(documented, k_man_source);
}

TEST(ConfigKeys, ShippedExampleSetsExactlyTheLoadersKeys)
{
  const std::string text = read_file(k_example);
  auto parsed = parse_config(text, k_example); // every key in it is accepted and read
  ASSERT_TRUE(parsed) << parsed.error().message;
  expect_same_keys(example_keys(toml::parse(text, k_example)), k_example);
}

// The example is the admin's reference: every key carries a comment on its line or the line above.
TEST(ConfigKeys, EveryKeyInTheShippedExampleIsCommented)
{
  const std::string text = read_file(k_example);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  toml::table root = toml::parse(text, k_example);
  int checked = 0;
  auto check = [&](const toml::node& node, const std::string& name) {
    auto line = static_cast<std::size_t>(node.source().begin.line);
    ASSERT_GE(line, 1U);
    bool commented = lines[line - 1].find('#') != std::string::npos ||
                     (line >= 2 && lines[line - 2].find_first_not_of(" ") != std::string::npos &&
                      lines[line - 2][lines[line - 2].find_first_not_of(" ")] == '#');
    EXPECT_TRUE(commented) << k_example << ":" << line << ": " << name << " has no comment";
    ++checked;
  };
  for (auto&& [name, node] : root) {
    if (const auto* tbl = node.as_table()) {
      for (auto&& [key, value] : *tbl) {
        check(value, "[" + std::string(name.str()) + "] " + std::string(key.str()));
      }
    }
  }
  EXPECT_EQ(checked, static_cast<int>(k_config_keys.size()) - 4); // all but the four tables
}

// The parser refuses what the list does not hold, at the key's line.
TEST(ConfigKeys, ParserRefusesKeysOutsideTheList)
{
  for (const auto& k : k_config_keys) {
    if (k.table.empty()) {
      continue;
    }
    std::string text = "[" + std::string(k.table) + "]\n" + std::string(k.key) + "_x = 1\n";
    auto r = parse_config(text, "t.toml");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().message, "t.toml:2: [" + std::string(k.table) + "] " + std::string(k.key) + "_x: unknown key");
  }
  auto r = parse_config("[tmpdirs]\nbase = \"/x\"\n", "t.toml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "t.toml:1: tmpdirs: unknown key");
}
