// Cache directory layout, manifests, publish/evict/sweep.
#include "stagehand/cache/store.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <ctime>
#include <random>

namespace stagehand::cache {

using nlohmann::json;

namespace {

constexpr const char* k_manifest = "manifest.json";

bool valid_key(const std::string& key)
{
  if (key.size() != 64) {
    return false;
  }
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

std::string random_suffix()
{
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return std::to_string(::getpid()) + "." + std::to_string(counter++) + "." + std::to_string(rd() & 0xffffff);
}

// A root-owned 0700 subdirectory, created if missing; a symlink or a foreign owner is refused.
Result<UniqueFd> own_subdir(int parent, const char* name, const std::string& shown)
{
  if (::mkdirat(parent, name, 0700) != 0 && errno != EEXIST) {
    return Error::from_errno("cannot create " + shown);
  }
  UniqueFd fd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Error::from_errno(shown);
  }
  if (st.st_uid != 0 || (st.st_mode & 077) != 0) {
    return Error::config(shown + ": refused: must be owned by root with mode 0700");
  }
  return fd;
}

Result<EntryMeta> meta_from_json(const std::string& text, const std::string& key)
{
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Error::io(key + ": unreadable manifest", EINVAL);
  }
  try {
    EntryMeta m;
    m.key = j.at("key").get<std::string>();
    m.source = j.at("source").get<std::string>();
    auto kind = stage::source_kind_named(j.at("shape").get<std::string>());
    auto how = stage::placement_named(j.at("how").get<std::string>());
    if (!kind || !how) {
      return Error::io(key + ": manifest: unknown shape or how", EINVAL);
    }
    m.kind = *kind;
    m.how = *how;
    m.files = j.at("files").get<std::uint64_t>();
    m.bytes = j.at("bytes").get<std::uint64_t>();
    m.disk_bytes = j.at("disk_bytes").get<std::uint64_t>();
    m.created = j.at("created").get<std::int64_t>();
    if (m.key != key) {
      return Error::io(key + ": manifest names another key", EINVAL);
    }
    return m;
  } catch (const json::exception& e) {
    return Error::io(key + ": manifest: " + e.what(), EINVAL);
  }
}

std::string meta_to_json(const EntryMeta& m)
{
  return json{{"version", 1},          {"key", m.key},       {"source", m.source},
              {"shape", stage::name_of(m.kind)}, {"how", stage::name_of(m.how)},       {"files", m.files},
              {"bytes", m.bytes},      {"disk_bytes", m.disk_bytes}, {"created", m.created}}
           .dump(1) + "\n";
}

// An entry that can never be served (no directory, no manifest, or a manifest that does not
// parse or names another key): debris. Not one that failed for a passing reason (EMFILE, EIO).
bool broken_entry(const Error& e)
{
  return e.code == ENOENT || e.code == ENOTDIR || e.code == ELOOP || e.code == EINVAL;
}

} // namespace

std::uint64_t disk_usage(int dir_fd, const std::string& name)
{
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return 0;
  }
  std::uint64_t total = static_cast<std::uint64_t>(st.st_blocks) * 512;
  if (!S_ISDIR(st.st_mode)) {
    return total;
  }
  UniqueFd top(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!top.valid()) {
    return total;
  }
  std::set<std::pair<dev_t, ino_t>> seen; // hard links inside the tree count once
  (void)fs::walk_tree(top.get(), [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
    if (e.st.st_nlink > 1 && !S_ISDIR(e.st.st_mode) && !seen.insert({e.st.st_dev, e.st.st_ino}).second) {
      return fs::WalkControl::go_on;
    }
    total += static_cast<std::uint64_t>(e.st.st_blocks) * 512;
    return fs::WalkControl::go_on;
  });
  return total;
}

Result<Store> Store::open(const std::string& path)
{
  auto root = fs::open_trusted_dir(path, fs::CreateMissing::yes);
  if (!root) {
    return root.error();
  }
  if (::fchmod(root->get(), 0700) != 0) {
    return Error::from_errno("cannot set the mode of " + path);
  }
  auto entries = own_subdir(root->get(), "entries", path + "/entries");
  if (!entries) {
    return entries.error();
  }
  auto tmp = own_subdir(root->get(), "tmp", path + "/tmp");
  if (!tmp) {
    return tmp.error();
  }
  Store s;
  s.m_path = path;
  s.m_root = std::move(*root);
  s.m_entries = std::move(*entries);
  s.m_tmp = std::move(*tmp);
  for (auto& meta : s.read_manifests()) {
    s.m_indexed->index.put(meta);
  }
  return s;
}

Result<UniqueFd> Store::open_entry(const std::string& key) const
{
  if (!valid_key(key)) {
    return Error::refused("not a cache key: " + key.substr(0, 80));
  }
  UniqueFd fd(::openat(m_entries.get(), key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    return Error::from_errno("cache entry " + key);
  }
  return fd;
}

Result<EntryMeta> Store::lookup(const std::string& key) const
{
  auto forget = [&](Error e) -> Error {
    if (broken_entry(e)) {
      std::lock_guard lock(m_indexed->mutex);
      m_indexed->index.erase(key);
    }
    return e;
  };
  auto dir = open_entry(key);
  if (!dir) {
    return dir.error().kind == ErrorKind::refused ? dir.error() : forget(dir.error());
  }
  auto text = fs::read_small_file(dir->get(), k_manifest);
  if (!text) { // ENOENT: no manifest; anything else (EMFILE, EIO) says nothing about the entry
    const int code = text.error().code != 0 ? text.error().code : ENOENT;
    return forget(Error::io(
      "cache entry " + key + (code == ENOENT ? ": no manifest" : ": manifest: " + text.error().message), code));
  }
  auto meta = meta_from_json(*text, key);
  if (!meta) {
    return forget(meta.error());
  }
  struct stat st {};
  if (::fstatat(dir->get(), k_manifest, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    meta->last_used = st.st_mtim.tv_sec;
    // The manifest holds the data's disk usage (it is written before its own size is known);
    // the entry's is that and the manifest's, as seal() reported it.
    meta->disk_bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  std::lock_guard lock(m_indexed->mutex);
  m_indexed->index.put(*meta);
  return meta;
}

Result<Fill> Store::begin_fill(const std::string& key, uid_t owner, gid_t group)
{
  Fill f;
  f.name = "fill." + key.substr(0, 16) + "." + random_suffix();
  if (::mkdirat(m_tmp.get(), f.name.c_str(), 0700) != 0) {
    return Error::from_errno("cannot create " + m_path + "/tmp/" + f.name);
  }
  f.dir.reset(::openat(m_tmp.get(), f.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!f.dir.valid() || ::fchown(f.dir.get(), owner, group) != 0) {
    Error e = Error::from_errno("cannot prepare " + m_path + "/tmp/" + f.name);
    discard(f);
    return e;
  }
  return f;
}

Result<EntryMeta> Store::publish(Fill& fill, EntryMeta meta)
{
  auto sealed = seal(fill, std::move(meta));
  if (!sealed) {
    return sealed.error();
  }
  auto published = publish_sealed(fill, *sealed);
  if (published) {
    sync_published();
  }
  return published;
}

Result<EntryMeta> Store::seal(Fill& fill, EntryMeta meta)
{
  // Both ways to publish (publish(), and the daemon's seal() then publish_sealed()) come here first.
  if (!valid_key(meta.key)) { // a name lookup, eviction and gc would never find again
    return Error::refused("not a cache key: " + meta.key.substr(0, 80));
  }
  auto used = take_over(fill.dir.get(), m_path + "/tmp/" + fill.name); // one walk: owner, modes, size
  if (!used) {
    return used.error();
  }
  meta.disk_bytes = *used;
  meta.created = std::time(nullptr);
  meta.last_used = meta.created;
  if (auto st = fs::write_file_atomic(fill.dir.get(), k_manifest, meta_to_json(meta), 0600, fs::Durability::none);
      !st) {
    return st.error();
  }
  meta.disk_bytes += disk_usage(fill.dir.get(), k_manifest);
  // One sync for the whole fill: data, then the rename that publishes it.
  if (::syncfs(fill.dir.get()) != 0) {
    return Error::from_errno("cannot sync the cache");
  }
  return meta;
}

Result<EntryMeta> Store::publish_sealed(Fill& fill, const EntryMeta& meta)
{
  if (::renameat2(m_tmp.get(), fill.name.c_str(), m_entries.get(), meta.key.c_str(), RENAME_NOREPLACE) != 0) {
    return Error::from_errno("cannot publish cache entry " + meta.key);
  }
  fill.name.clear();
  std::lock_guard lock(m_indexed->mutex);
  m_indexed->index.put(meta);
  return meta;
}

void Store::sync_published() const { (void)::fsync(m_entries.get()); }

void Store::discard(Fill& fill)
{
  if (!fill.name.empty()) {
    (void)fs::remove_tree(m_tmp.get(), fill.name);
    fill.name.clear();
  }
  fill.dir.reset();
}

Status Store::touch(const std::string& key, std::int64_t now)
{
  auto dir = open_entry(key);
  if (!dir) {
    return dir.error();
  }
  struct timespec times[2] = {{now, 0}, {now, 0}};
  if (::utimensat(dir->get(), k_manifest, times, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::from_errno("cannot touch cache entry " + key);
  }
  std::lock_guard lock(m_indexed->mutex);
  m_indexed->index.touch(key, now);
  return ok_status();
}

Status Store::evict(const std::string& key)
{
  auto aside = set_aside(key);
  if (!aside) {
    return aside.error();
  }
  return remove_from_tmp(*aside);
}

Result<std::string> Store::set_aside(const std::string& key)
{
  if (!valid_key(key)) {
    return Error::refused("not a cache key: " + key.substr(0, 80));
  }
  std::string aside = "evict." + key.substr(0, 16) + "." + random_suffix();
  if (::renameat2(m_entries.get(), key.c_str(), m_tmp.get(), aside.c_str(), RENAME_NOREPLACE) != 0) {
    Error e = Error::from_errno("cannot evict cache entry " + key);
    if (e.code == ENOENT) {
      std::lock_guard lock(m_indexed->mutex);
      m_indexed->index.erase(key); // gone already
    }
    return e;
  }
  std::lock_guard lock(m_indexed->mutex);
  m_indexed->index.erase(key);
  return aside;
}

Status Store::remove_from_tmp(const std::string& name)
{
  return fs::remove_tree(m_tmp.get(), name);
}

std::vector<EntryMeta> Store::read_manifests() const
{
  std::vector<EntryMeta> out;
  for (const auto& name : scan().unknown) { // the index is empty yet: every name
    if (!valid_key(name)) {
      continue;
    }
    auto text = open_entry(name);
    if (!text) {
      continue;
    }
    auto manifest = fs::read_small_file(text->get(), k_manifest);
    if (!manifest) {
      continue;
    }
    auto meta = meta_from_json(*manifest, name);
    if (!meta) {
      continue;
    }
    struct stat st {};
    if (::fstatat(text->get(), k_manifest, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      meta->last_used = st.st_mtim.tv_sec;
      meta->disk_bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    out.push_back(std::move(*meta));
  }
  return out;
}

std::vector<EntryMeta> Store::list() const
{
  std::lock_guard lock(m_indexed->mutex);
  return m_indexed->index.all();
}

CacheTotals Store::totals() const
{
  std::lock_guard lock(m_indexed->mutex);
  return m_indexed->index.totals();
}

Index::Room Store::make_room(Index::Incoming incoming, std::uint64_t incoming_bytes, const CacheLimits& limits,
                             const std::function<bool(const std::string&)>& pinned) const
{
  std::lock_guard lock(m_indexed->mutex);
  return m_indexed->index.make_room(incoming, incoming_bytes, limits, pinned);
}

Store::Scan Store::scan() const
{
  Scan out;
  auto names_of = [](int dir_fd, std::vector<std::string>& names) {
    if (fs::DirStream d = fs::open_dir_stream(dir_fd)) {
      while (struct dirent* e = ::readdir(d.get())) {
        std::string n = e->d_name;
        if (n != "." && n != "..") {
          names.push_back(std::move(n));
        }
      }
    }
  };
  names_of(m_tmp.get(), out.tmp);
  std::vector<std::string> on_disk;
  names_of(m_entries.get(), on_disk);
  std::sort(on_disk.begin(), on_disk.end());
  std::vector<std::string> indexed; // after the listing: what is published meanwhile is not "gone"
  {
    std::lock_guard lock(m_indexed->mutex);
    indexed = m_indexed->index.keys(); // sorted
  }
  std::set_difference(on_disk.begin(), on_disk.end(), indexed.begin(), indexed.end(), std::back_inserter(out.unknown));
  std::set_difference(indexed.begin(), indexed.end(), on_disk.begin(), on_disk.end(), std::back_inserter(out.gone));
  return out;
}

std::vector<Store::Debris> Store::set_aside_debris(const std::set<std::string>& active_fills, const Scan& scan)
{
  std::vector<Debris> out;
  struct stat st {};
  for (const auto& n : scan.tmp) {
    // Still there: a fill published or a removal finished since the scan is no debris.
    if (!active_fills.count(n) && ::fstatat(m_tmp.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      out.push_back(Debris{"tmp/" + n, n});
    }
  }
  for (const auto& key : scan.gone) { // gone from the disk (not by us): gone from the index
    if (::fstatat(m_entries.get(), key.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
      std::lock_guard lock(m_indexed->mutex);
      m_indexed->index.erase(key);
    }
  }
  for (const auto& n : scan.unknown) {
    // Read once (a restart's index knows every sound entry): a sound one joins the index.
    if (valid_key(n)) {
      auto meta = lookup(n);
      if (meta || !broken_entry(meta.error())) {
        continue;
      }
    }
    // Out of entries/ by one rename (no job finds it from then on), under a name of its own in tmp/.
    std::string aside = "broken." + random_suffix();
    if (::renameat2(m_entries.get(), n.c_str(), m_tmp.get(), aside.c_str(), RENAME_NOREPLACE) == 0) {
      out.push_back(Debris{"entries/" + n, std::move(aside)});
    }
  }
  return out;
}

std::vector<std::string> Store::sweep(const std::set<std::string>& active_fills)
{
  std::vector<std::string> removed;
  for (const auto& d : set_aside_debris(active_fills, scan())) {
    if (remove_from_tmp(d.tmp_name)) {
      removed.push_back(d.shown);
    }
  }
  return removed;
}

} // namespace stagehand::cache
