// confine_writes: a Landlock ruleset of the write rights, each allowed beneath the given
// directories, written with the raw system calls (glibc has no wrappers).
#include "stagehand/util/landlock.hpp"

#include "stagehand/util/fd.hpp"

#include <linux/landlock.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444 // Linux 5.13, the same on every architecture
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13) // ABI 2, Linux 5.19
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) // ABI 3, Linux 6.2
#endif

namespace stagehand {

namespace {

// The first field of struct landlock_ruleset_attr, which every ABI takes alone.
struct RulesetAttr
{
  std::uint64_t handled_access_fs;
};

constexpr std::uint64_t k_file_writes = LANDLOCK_ACCESS_FS_WRITE_FILE;
constexpr std::uint64_t k_tree_writes = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                                        LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                                        LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                                        LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                                        LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM |
                                        LANDLOCK_ACCESS_FS_REFER;

// A Landlock call's failure `err`: no Landlock where the kernel has none or refuses it, else the error.
Result<WritesConfined> unavailable_or(int err, const char* what)
{
  if (err == ENOSYS || err == EOPNOTSUPP || err == EPERM || err == EINVAL) {
    return WritesConfined::unavailable;
  }
  return Error::from_errno(what, err);
}

Status add_beneath(int ruleset, int fd, std::uint64_t access)
{
  struct landlock_path_beneath_attr rule {};
  rule.allowed_access = access;
  rule.parent_fd = fd;
  if (::syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0) {
    return Error::from_errno("landlock: a rule");
  }
  return ok_status();
}

} // namespace

bool writes_confinable()
{
  return ::syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION) >= 2;
}

Result<WritesConfined> confine_writes(std::span<const int> dirs)
{
  const long abi = ::syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 2) { // ABI 1 refuses every link and rename across directories, which a fill makes
    return abi >= 0 ? Result<WritesConfined>(WritesConfined::unavailable) : unavailable_or(errno, "landlock");
  }
  const std::uint64_t truncate = abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0;
  RulesetAttr attr {k_tree_writes | truncate};
  UniqueFd ruleset(static_cast<int>(::syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0)));
  if (!ruleset.valid()) {
    return unavailable_or(errno, "landlock: the ruleset");
  }
  UniqueFd null(::open("/dev/null", O_PATH | O_CLOEXEC));
  if (!null.valid()) {
    return Error::from_errno("landlock: /dev/null");
  }
  Status added = add_beneath(ruleset.get(), null.get(), k_file_writes | truncate);
  for (std::size_t i = 0; added && i < dirs.size(); ++i) {
    added = add_beneath(ruleset.get(), dirs[i], k_tree_writes | truncate);
  }
  if (!added) { // (EPERM: a seccomp filter that lets the ruleset be made, not filled)
    return unavailable_or(added.error().code, "landlock: a rule");
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Error::from_errno("landlock: no_new_privs");
  }
  if (::syscall(__NR_landlock_restrict_self, ruleset.get(), 0) != 0) {
    return unavailable_or(errno, "landlock: restrict");
  }
  return WritesConfined::confined;
}

} // namespace stagehand
