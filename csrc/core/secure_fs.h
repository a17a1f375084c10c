#pragma once
// File-system helpers for folders other local users may reach: the kernel
// disk cache and the trace dumps. Folders are made 0700 and trusted only when
// no other (non-root) user can replace any part of the path; files are opened
// without following symlinks, type- and owner-checked after opening, read with
// a size bound, written to a fresh O_EXCL temporary and renamed into place.
// docs/security.md states the threat model.
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tl::secure_fs {

struct DirTrust {
  std::string problem;  // "" when trusted, else why not (for the user's warning)
  uid_t owner = 0;      // the folder's owner: the current user, or root (a shared read-only cache)
  bool writable = false;  // this process may create files in it
};

// Whether files in `dir` can be trusted: every existing path component
// (symlinks resolved, their targets checked too) must be a directory owned by
// root or the current user and not writable by group or others, unless it is
// root-owned and sticky (/tmp); `dir` itself must be owned by the current
// user or root and never writable by others. `as_parent`: `dir` is only the
// parent of an mkdtemp folder, so it may be a root-owned sticky folder too.
// Never throws.
DirTrust check_dir(const std::string& dir, bool as_parent = false);

// Creates `dir` and its missing parents with mode 0700 (whatever the umask),
// then check_dir(). Never throws.
DirTrust make_private_dir(const std::string& dir, bool as_parent = false);

// Contents of the regular file `path`, or nullopt when it is missing, not a
// regular file (a directory, FIFO or device: opened O_NONBLOCK, so a FIFO
// never blocks), a symlink, not owned by `owner`, with any of the `forbidden`
// mode bits (default: writable by group/others), or larger than `max_bytes`.
// Reads at most max_bytes.
std::optional<std::string> read_file(const std::string& path, uint64_t max_bytes, uid_t owner,
                                     mode_t forbidden = S_IWGRP | S_IWOTH);

// Writes `data` to a fresh temporary beside `path` (random name, O_EXCL,
// mode `mode`) and renames it over `path`. False on any failure (the
// temporary is removed).
bool write_file_atomic(const std::string& path, std::string_view data, mode_t mode = 0600);

// Creates `path` (O_EXCL: never an existing file or symlink) with mode 0600
// and writes `data`. False when it exists or cannot be written.
bool write_new_file(const std::string& path, std::string_view data);

// Creates `path` with mode 0600 only if nothing is there (link(2) of a
// complete temporary, so readers never see a partial file). False if it exists.
bool publish_new_file(const std::string& path, std::string_view data);

// A fresh folder <parent>/<prefix>XXXXXX (mkdtemp: mode 0700, unique name);
// "" on failure.
std::string make_unique_dir(const std::string& parent, const std::string& prefix);

// `n` bytes from the kernel's random source (getrandom), "" if it failed.
std::string random_bytes(size_t n);
std::string random_name(size_t bytes = 8);  // hex of random_bytes, "" if it failed

// `text` as one safe path component: every character other than
// [A-Za-z0-9_] replaced by '_' ("_" when empty).
std::string sanitize_name(std::string_view text);

}  // namespace tl::secure_fs
