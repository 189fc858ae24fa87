// ustar headers, pax where ustar falls short, and a buffered writer for the stream.
#include "stagehand/archive/tar_stream.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>

namespace stagehand::archive {

namespace {

constexpr std::size_t k_name = 100;
constexpr std::uint64_t k_max_octal11 = 077777777777ULL; // what 11 octal digits hold (8 GiB - 1)

// `value` in octal, zero-padded to `width - 1` digits and a NUL, at `field`.
void octal(char* field, std::size_t width, std::uint64_t value)
{
  for (std::size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  field[width - 1] = '\0';
}

void text(char* field, std::size_t width, const std::string& s)
{
  std::memcpy(field, s.data(), std::min(width, s.size()));
}

// One 512-byte ustar header.
std::string ustar_block(char type, const std::string& name, std::uint64_t mode, std::uint64_t size,
                        std::uint64_t mtime, const std::string& link)
{
  std::string b(k_tar_block, '\0');
  text(&b[0], k_name, name);
  octal(&b[100], 8, mode);
  octal(&b[108], 8, 0);
  octal(&b[116], 8, 0);
  octal(&b[124], 12, std::min(size, k_max_octal11));
  octal(&b[136], 12, std::min(mtime, k_max_octal11));
  b[156] = type;
  text(&b[157], k_name, link);
  std::memcpy(&b[257], "ustar\0" "00", 8);
  std::memset(&b[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : b) {
    sum += c;
  }
  octal(&b[148], 7, sum); // six digits, a NUL, and the space already there
  return b;
}

// One pax record: "LEN key=value\n", LEN counting the whole record.
std::string pax_record(const std::string& key, const std::string& value)
{
  const std::size_t rest = key.size() + value.size() + 3; // ' ', '=', '\n'
  std::size_t len = rest + 1;
  while (std::to_string(len).size() + rest != len) {
    ++len;
  }
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string mtime_text(const struct stat& st)
{
  char ns[16];
  std::snprintf(ns, sizeof ns, "%09ld", static_cast<long>(st.st_mtim.tv_nsec));
  return std::to_string(static_cast<long long>(st.st_mtim.tv_sec)) + "." + ns;
}

} // namespace

std::size_t tar_padding(std::uint64_t size)
{
  return static_cast<std::size_t>((k_tar_block - size % k_tar_block) % k_tar_block);
}

std::string tar_header(TarType type, const std::string& rel, const struct stat& st, std::uint64_t size,
                       const std::string& link)
{
  const std::string name = type == TarType::directory ? rel + "/" : rel;
  const bool negative_time = st.st_mtim.tv_sec < 0;
  const auto mtime = negative_time ? 0 : static_cast<std::uint64_t>(st.st_mtim.tv_sec);
  std::string records;
  if (name.size() > k_name || link.size() > k_name) {
    records += pax_record("hdrcharset", "BINARY"); // names are bytes: none converted from UTF-8
  }
  if (name.size() > k_name) {
    records += pax_record("path", name);
  }
  if (link.size() > k_name) {
    records += pax_record("linkpath", link);
  }
  if (size > k_max_octal11) {
    records += pax_record("size", std::to_string(size));
  }
  if (!records.empty() || negative_time || mtime > k_max_octal11) {
    records += pax_record("mtime", mtime_text(st));
  }
  const std::uint64_t mode = st.st_mode & 07777;
  std::string out;
  if (!records.empty()) {
    const std::size_t slash = rel.rfind('/');
    const std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
    out = ustar_block('x', ("PaxHeader/" + base).substr(0, k_name), 0644, records.size(), mtime, {});
    out += records;
    out.append(tar_padding(records.size()), '\0');
  }
  out += ustar_block(static_cast<char>(type), name, mode, size, mtime, link);
  return out;
}

TarStreamWriter::TarStreamWriter(int out_fd) : m_fd(out_fd), m_buf(k_buffer, '\0') {}

Status TarStreamWriter::append(const char* p, std::size_t n)
{
  while (n > 0) {
    if (m_used == k_buffer) {
      if (auto st = flush(); !st) {
        return st;
      }
    }
    const std::size_t take = std::min(n, k_buffer - m_used);
    std::memcpy(&m_buf[m_used], p, take);
    m_used += take;
    p += take;
    n -= take;
  }
  return ok_status();
}

Status TarStreamWriter::header(TarType type, const std::string& rel, const struct stat& st, std::uint64_t size,
                               const std::string& link)
{
  const std::string h = tar_header(type, rel, st, size, link);
  return append(h.data(), h.size());
}

Result<std::span<char>> TarStreamWriter::room(std::size_t n)
{
  if (k_buffer - m_used < n) {
    if (auto st = flush(); !st) {
      return st.error();
    }
  }
  return std::span<char>(&m_buf[m_used], std::min(n, k_buffer));
}

Status TarStreamWriter::zeros(std::size_t n)
{
  static const char k_zero[k_tar_block] = {};
  while (n > 0) {
    const std::size_t take = std::min(n, sizeof k_zero);
    if (auto st = append(k_zero, take); !st) {
      return st;
    }
    n -= take;
  }
  return ok_status();
}

Status TarStreamWriter::wait_writable()
{
  const int timeout = m_patience ? m_patience() : -1;
  const auto t0 = std::chrono::steady_clock::now();
  struct pollfd room {m_fd, POLLOUT, 0};
  const int ready = ::poll(&room, 1, timeout);
  m_waited += std::chrono::steady_clock::now() - t0;
  if (ready == 0) {
    return Error::io(m_why_timed_out, ETIMEDOUT);
  }
  if (ready < 0 && errno != EINTR) {
    return Error::from_errno("the stream to the cache");
  }
  return ok_status();
}

Status TarStreamWriter::flush()
{
  const char* p = m_buf.data();
  std::size_t n = m_used;
  m_used = 0;
  while (n > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    const ssize_t w = ::write(m_fd, p, n);
    m_waited += std::chrono::steady_clock::now() - t0; // a blocking pipe waits in write(2)
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && errno == EAGAIN) {
      if (auto st = wait_writable(); !st) {
        return st;
      }
    } else if (w == 0 || errno != EINTR) {
      return Error::from_errno("the stream to the cache");
    }
  }
  return ok_status();
}

Status TarStreamWriter::finish()
{
  if (auto st = zeros(2 * k_tar_block); !st) {
    return st;
  }
  return flush();
}

} // namespace stagehand::archive
