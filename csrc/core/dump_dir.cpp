#include "core/dump_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "core/log.h"
#include "core/secure_fs.h"

namespace tl {
namespace {
std::mutex g_mu;
std::map<std::pair<std::string, pid_t>, std::string> g_dirs;  // (debug_dir, pid) -> folder
std::pair<pid_t, std::string> g_failure_dir;
}  // namespace

std::string process_dump_dir(const std::string& dir) {
  if (dir.empty()) return "";
  // NOTE: absolute, so paths stay right if the process changes its working folder.
  std::error_code ec;
  std::string debug_dir = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) return "";
  std::string problem;
  std::string made;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto key = std::make_pair(debug_dir, getpid());
    if (auto it = g_dirs.find(key); it != g_dirs.end()) return it->second;
    secure_fs::DirTrust t = secure_fs::make_private_dir(debug_dir, /*as_parent=*/true);
    if (t.problem.empty() && t.writable)
      made = secure_fs::make_unique_dir(debug_dir, "run-" + std::to_string(getpid()) + "-");
    if (made.empty()) problem = t.problem.empty() ? "cannot create a folder there" : t.problem;
    // NOTE: a failure is remembered too, so the checks and the warning happen once per folder.
    g_dirs[key] = made;
  }
  if (!problem.empty())
    warn_user("not writing trace output to " + debug_dir + ": " + problem +
              " (see docs/security.md)");
  return made;
}

std::string process_dump_subdir(const std::string& debug_dir, const std::string& name) {
  std::string base = process_dump_dir(debug_dir);
  if (base.empty()) return "";
  std::string dir = base + "/" + name;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "";
  struct stat st {};
  // NOTE: base is ours alone (0700), so what is there was made by this process.
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return dir;
}

std::string failure_dump_dir() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_failure_dir.first == getpid() && !g_failure_dir.second.empty()) return g_failure_dir.second;
  std::error_code ec;
  std::string tmp = std::filesystem::temp_directory_path(ec).string();
  if (ec || !secure_fs::check_dir(tmp, /*as_parent=*/true).problem.empty()) return "";
  std::string dir = secure_fs::make_unique_dir(tmp, "torchlite-" + std::to_string(geteuid()) + "-");
  g_failure_dir = {getpid(), dir};
  return dir;
}

bool write_dump(const std::string& path, std::string_view text) {
  return !path.empty() && secure_fs::write_new_file(path, text);
}

}  // namespace tl
