// Host list grammar (Slurm 23.11 and later): list := expr (',' expr)*;
// expr := (text | '[' ranges ']')+; ranges := range (',' range)*; range := digits | digits '-' digits.
#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/util/strings.hpp"

#include <charconv>
#include <cstdint>

namespace stagehand::ddp {

namespace {

struct Range
{
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::size_t width = 0; // zero padding: the lower bound's digit count
};

// One piece of an expression: literal text, or a bracket group (a list of ranges).
struct Piece
{
  std::string text;
  std::vector<Range> ranges;
  bool is_group = false;
};

Error bad(std::string_view list, const std::string& why)
{
  return Error::refused("bad host list \"" + std::string(list) + "\": " + why);
}

bool all_digits(std::string_view s)
{
  if (s.empty() || s.size() > 18) {
    return false;
  }
  for (char c : s) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

std::uint64_t to_u64(std::string_view s)
{
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

Result<std::vector<Range>> parse_group(std::string_view list, std::string_view body)
{
  std::vector<Range> out;
  for (std::string_view item : split(body, ',')) {
    std::size_t dash = item.find('-');
    std::string_view lo = item.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) {
      return bad(list, "\"[" + std::string(body) + "]\" is not a list of numbers and ranges");
    }
    Range r{to_u64(lo), to_u64(hi), lo.size()};
    if (r.hi < r.lo) {
      return bad(list, "range " + std::string(item) + " goes backwards");
    }
    out.push_back(r);
  }
  return out;
}

std::string pad(std::uint64_t n, std::size_t width)
{
  std::string s = std::to_string(n);
  if (s.size() < width) {
    s.insert(0, width - s.size(), '0');
  }
  return s;
}

// Appends the expansion of one expression to `out`. Slurm's order, outermost to innermost, is
// groups n-1, n-2, ..., 1, then n (1-based): for two groups the first is outermost.
Status expand_pieces(std::string_view list, const std::vector<Piece>& pieces, std::vector<std::string>& out)
{
  std::vector<std::size_t> group_at; // index in `pieces` of each bracket group
  std::vector<std::vector<std::string>> values;
  std::uint64_t total = 1;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].is_group) {
      continue;
    }
    group_at.push_back(i);
    std::uint64_t count = 0;
    for (const Range& r : pieces[i].ranges) {
      count += r.hi - r.lo + 1;
    }
    if (count > k_max_hosts || (total *= count) > k_max_hosts || out.size() + total > k_max_hosts) {
      return bad(list, "more than " + std::to_string(k_max_hosts) + " hosts");
    }
    std::vector<std::string> v;
    for (const Range& r : pieces[i].ranges) {
      for (std::uint64_t n = r.lo; n <= r.hi; ++n) {
        v.push_back(pad(n, r.width));
      }
    }
    values.push_back(std::move(v));
  }
  const std::size_t n = values.size();
  std::vector<std::size_t> order; // groups, outermost first
  for (std::size_t g = n >= 2 ? n - 1 : n; g-- > 0;) {
    order.push_back(g);
  }
  if (n >= 2) {
    order.push_back(n - 1);
  }
  std::vector<std::size_t> idx(n, 0);
  for (;;) {
    std::string host;
    std::size_t g = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      host += pieces[i].is_group ? values[g][idx[g]] : pieces[i].text;
      g += pieces[i].is_group;
    }
    out.push_back(std::move(host));
    std::size_t k = order.size();
    for (; k-- > 0;) { // odometer: innermost group moves fastest
      std::size_t grp = order[k];
      if (++idx[grp] < values[grp].size()) {
        break;
      }
      idx[grp] = 0;
    }
    if (k == static_cast<std::size_t>(-1)) {
      return ok_status();
    }
  }
}

// Splits the list at commas outside brackets.
Result<std::vector<std::string_view>> split_top(std::string_view list)
{
  std::vector<std::string_view> exprs;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[') {
      if (++depth > 1) {
        return bad(list, "nested brackets");
      }
    } else if (c == ']') {
      if (--depth < 0) {
        return bad(list, "unbalanced ']'");
      }
    } else if (c == ',' && depth == 0) {
      exprs.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) {
    return bad(list, "unbalanced '['");
  }
  exprs.push_back(list.substr(start));
  return exprs;
}

Result<std::vector<Piece>> parse_expr(std::string_view list, std::string_view expr)
{
  std::vector<Piece> pieces;
  std::size_t i = 0;
  while (i < expr.size()) {
    if (expr[i] == '[') {
      std::size_t close = expr.find(']', i);
      auto ranges = parse_group(list, expr.substr(i + 1, close - i - 1));
      if (!ranges) {
        return ranges.error();
      }
      pieces.push_back(Piece{{}, std::move(*ranges), true});
      i = close + 1;
    } else {
      std::size_t next = expr.find('[', i);
      if (next == std::string_view::npos) {
        next = expr.size();
      }
      pieces.push_back(Piece{std::string(expr.substr(i, next - i)), {}, false});
      i = next;
    }
  }
  return pieces;
}

bool valid_name_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '[' || c == ']' || c == ',';
}

} // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view list)
{
  for (char c : list) {
    if (!valid_name_char(c)) {
      return bad(list, std::string("unexpected character '") + c + "'");
    }
  }
  auto exprs = split_top(list);
  if (!exprs) {
    return exprs.error();
  }
  std::vector<std::string> out;
  for (std::string_view expr : *exprs) {
    if (expr.empty()) {
      continue; // Slurm ignores empty items ("a,,b")
    }
    auto pieces = parse_expr(list, expr);
    if (!pieces) {
      return pieces.error();
    }
    auto st = expand_pieces(list, *pieces, out);
    if (!st) {
      return st.error();
    }
  }
  if (out.empty()) {
    return bad(list, "no hosts");
  }
  return out;
}

Result<std::string> first_host(std::string_view list)
{
  auto exprs = split_top(list);
  if (!exprs) {
    return exprs.error();
  }
  for (std::string_view expr : *exprs) {
    if (expr.empty()) {
      continue;
    }
    auto hosts = expand_hostlist(expr);
    if (!hosts) {
      return hosts.error();
    }
    return hosts->front();
  }
  return bad(list, "no hosts");
}

} // namespace stagehand::ddp
