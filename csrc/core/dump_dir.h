#pragma once
// Where debug output goes: TORCHLITE_TRACE's graphs and kernels, and the IR of
// a kernel LLVM rejected. Each process writes into a fresh folder of its own
// (mkdtemp: 0700, unpredictable name) inside a debug_dir that secure_fs
// trusts, so no other local user can plant a symlink or file where a dump is
// written (docs/security.md).
#include <string>
#include <string_view>

namespace tl {

// This process's folder <debug_dir>/run-<pid>-XXXXXX, made on first use (and
// again after a fork); debug_dir itself is created 0700 if missing. "" (and a
// warning, once) when debug_dir is not trusted or cannot be made.
std::string process_dump_dir(const std::string& debug_dir);

// A subfolder `name` (made 0700) of process_dump_dir(debug_dir); "" on failure.
std::string process_dump_subdir(const std::string& debug_dir, const std::string& name);

// A private folder for evidence of a failure when no trace is on:
// <system temp>/torchlite-<uid>-XXXXXX, made once per process. "" on failure.
std::string failure_dump_dir();

// Writes a new dump file (never through a symlink or over an existing file).
// False when it could not; debug output never fails a compile.
bool write_dump(const std::string& path, std::string_view text);

}  // namespace tl
