// Trace and failure dumps go to fresh private folders, never through planted names.
#include "core/dump_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/secure_fs.h"

namespace fs = std::filesystem;

namespace {
mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}
}  // namespace

TEST_CASE("each process dumps into a fresh 0700 folder inside debug_dir", "[core]") {
  fs::path base = tl::secure_fs::make_unique_dir(fs::temp_directory_path().string(), "tl_dump_");
  fs::path debug = base / "dbg";
  std::string run = tl::process_dump_dir(debug.string());
  REQUIRE(!run.empty());
  CHECK(fs::path(run).parent_path() == debug);
  CHECK(fs::path(run).filename().string().rfind("run-" + std::to_string(getpid()) + "-", 0) == 0);
  CHECK(mode_of(debug) == 0700);
  CHECK(mode_of(run) == 0700);
  CHECK(tl::process_dump_dir(debug.string()) == run);  // once per process
  std::string sub = tl::process_dump_subdir(debug.string(), "kernels");
  CHECK(sub == run + "/kernels");
  CHECK(tl::write_dump(sub + "/a.ll", "text"));
  CHECK_FALSE(tl::write_dump(sub + "/a.ll", "again"));  // never over an existing file
  fs::remove_all(base);
}

TEST_CASE("a debug_dir others can write gets no dumps", "[core]") {
  fs::path base = tl::secure_fs::make_unique_dir(fs::temp_directory_path().string(), "tl_dump_");
  fs::create_directory(base / "open");
  chmod((base / "open").c_str(), 0777);
  CHECK(tl::process_dump_dir((base / "open").string()) == "");
  CHECK(tl::process_dump_subdir((base / "open").string(), "kernels") == "");
  CHECK(fs::is_empty(base / "open"));
  fs::remove_all(base);
}

TEST_CASE("failure dumps go to a private per-user temporary folder", "[core]") {
  std::string dir = tl::failure_dump_dir();
  REQUIRE(!dir.empty());
  CHECK(mode_of(dir) == 0700);
  CHECK(fs::path(dir).filename().string().rfind("torchlite-" + std::to_string(geteuid()) + "-",
                                                0) == 0);
  CHECK(tl::failure_dump_dir() == dir);
}
