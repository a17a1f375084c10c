#include "core/secure_fs.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace tl::secure_fs {

namespace {
namespace fs = std::filesystem;

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// Why the existing component `p` makes the path untrusted, "" if it does not.
// `last`: `p` is the folder itself, whose files we read.
std::string check_component(const std::string& p, const struct stat& st, bool last, uid_t me) {
  if (!S_ISDIR(st.st_mode)) return p + " is not a directory";
  if (st.st_uid != me && st.st_uid != 0)
    return p + " is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  // NOTE: a root-owned sticky folder (/tmp) lets nobody else rename or delete
  // what we put in it, so it may be world-writable as a parent; never as the folder itself.
  bool root_sticky = st.st_uid == 0 && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (last || !root_sticky))
    return p + " is writable by group or others (mode " + octal(st.st_mode) + ")";
  return "";
}

// Checks every component of the absolute, normalised `path`; sets `missing`
// when a component does not exist (the rest is then unchecked). `depth` bounds
// symlink resolution.
std::string walk(const fs::path& path, uid_t me, bool as_parent, bool* missing,
                 struct stat* last_st, int depth) {
  if (depth > 8) return path.string() + ": too many levels of symbolic links";
  std::vector<fs::path> parts;
  for (const fs::path& part : path)
    if (!part.empty()) parts.push_back(part);
  fs::path cur = "/";
  struct stat st {};
  if (lstat("/", &st) != 0) return "cannot stat /";
  if (std::string why = check_component("/", st, parts.size() <= 1 && !as_parent, me); !why.empty())
    return why;
  for (size_t i = 1; i < parts.size(); ++i) {
    bool last = i + 1 == parts.size() && !as_parent;
    fs::path next = cur / parts[i];
    if (lstat(next.c_str(), &st) != 0) {
      if (errno != ENOENT) return next.string() + ": " + std::strerror(errno);
      *missing = true;
      return "";
    }
    if (S_ISLNK(st.st_mode)) {
      // NOTE: the link's own folder was checked above, so only we can swap
      // the link; its target is checked as if written out.
      char resolved[PATH_MAX];
      if (!realpath(next.c_str(), resolved))
        return next.string() + " is a symbolic link that cannot be resolved";
      bool target_missing = false;
      std::string why =
          walk(fs::path(resolved), me, as_parent || !last, &target_missing, &st, depth + 1);
      if (!why.empty() || target_missing) return why.empty() ? next.string() + " dangles" : why;
      if (!S_ISDIR(st.st_mode)) return next.string() + " is not a directory";
      cur = resolved;
    } else {
      if (std::string why = check_component(next.string(), st, last, me); !why.empty()) return why;
      cur = next;
    }
  }
  *last_st = st;
  return "";
}

bool write_all(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n, left -= static_cast<size_t>(n);
  }
  return true;
}

// A fresh temporary beside `path`, opened O_EXCL; fd -1 on failure.
int open_temporary(const std::string& path, mode_t mode, std::string* tmp) {
  fs::path p(path);
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string name = random_name();
    if (name.empty()) return -1;
    std::string leaf = ".";
    leaf.append(p.filename().string()).append(".tmp-").append(name);
    *tmp = (p.parent_path() / leaf).string();
    int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// Writes a complete temporary beside `path`; "" on failure.
std::string write_temporary(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp;
  int fd = open_temporary(path, mode, &tmp);
  if (fd < 0) return "";
  bool ok = write_all(fd, data);
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    return "";
  }
  return tmp;
}
}  // namespace

DirTrust check_dir(const std::string& dir, bool as_parent) {
  DirTrust t;
  if (dir.empty()) {
    t.problem = "no folder given";
    return t;
  }
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec).lexically_normal();
  if (ec) {
    t.problem = dir + ": " + ec.message();
    return t;
  }
  if (!abs.has_filename() && abs != abs.root_path()) abs = abs.parent_path();  // "a/b/"
  bool missing = false;
  struct stat st {};
  t.problem = walk(abs, geteuid(), as_parent, &missing, &st, 0);
  if (t.problem.empty() && missing) t.problem = dir + " does not exist";
  if (!t.problem.empty()) return t;
  t.owner = st.st_uid;
  t.writable = ::access(abs.c_str(), W_OK | X_OK) == 0;
  return t;
}

DirTrust make_private_dir(const std::string& dir, bool as_parent) {
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec).lexically_normal();
  if (!dir.empty() && !ec) {
    fs::path cur = abs.root_path();
    for (auto it = ++abs.begin(); it != abs.end(); ++it) {
      if (it->empty()) continue;
      cur /= *it;
      // NOTE: mode 0700 is only ever narrowed by the umask, so even umask 000 gives 0700.
      if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) break;
    }
  }
  return check_dir(dir, as_parent);
}

std::optional<std::string> read_file(const std::string& path, uint64_t max_bytes, uid_t owner,
                                     mode_t forbidden) {
  // NOTE: O_NONBLOCK: opening a FIFO planted at `path` must not wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner &&
      !(st.st_mode & forbidden) && static_cast<uint64_t>(st.st_size) <= max_bytes) {
    std::string data(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::read(fd, data.data() + got, data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == data.size()) out = std::move(data);
  }
  ::close(fd);
  return out;
}

bool write_file_atomic(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp = write_temporary(path, data, mode);
  if (tmp.empty()) return false;
  // NOTE: rename replaces a symlink at `path` itself, never what it points to.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool publish_new_file(const std::string& path, std::string_view data) {
  std::string tmp = write_temporary(path, data, 0600);
  if (tmp.empty()) return false;
  bool ok = ::link(tmp.c_str(), path.c_str()) == 0;
  ::unlink(tmp.c_str());
  return ok;
}

bool write_new_file(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write_all(fd, data);
  return ::close(fd) == 0 && ok;
}

std::string make_unique_dir(const std::string& parent, const std::string& prefix) {
  std::string templ = (fs::path(parent) / (prefix + "XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) return "";
  return buf.data();
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < n) {
    // NOTE: getrandom(2) is missing only on kernels older than 3.17.
    int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < n) {
      ssize_t r = ::read(fd, out.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    if (fd >= 0) ::close(fd);
  }
  // NOTE: no randomness gives "": callers fail rather than use guessable names or secrets.
  return got < n ? "" : out;
}

std::string random_name(size_t bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  // NOTE: "" when the random source failed (random_bytes).
  for (unsigned char c : random_bytes(bytes)) out += hex[c >> 4], out += hex[c & 0xf];
  return out;
}

std::string sanitize_name(std::string_view text) {
  std::string s(text.empty() ? "_" : text);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return s;
}

}  // namespace tl::secure_fs
