// The file-system helpers that keep the kernel cache and trace dumps safe from
// other local users: private folders, trust checks of every path component,
// reads that never follow links, block or read unbounded, atomic writes.
#include "core/secure_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
namespace sf = tl::secure_fs;

namespace {
// A fresh private folder for one test, removed at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = sf::make_unique_dir(fs::temp_directory_path().string(), "tl_secure_fs_test-");
    REQUIRE(!dir.empty());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
}  // namespace

TEST_CASE("make_private_dir creates every missing folder 0700 even under umask 000", "[core]") {
  Scratch s;
  mode_t old = umask(0);
  sf::DirTrust t = sf::make_private_dir((s.dir / "a" / "b").string());
  umask(old);
  CHECK(t.problem == "");
  CHECK(t.writable);
  CHECK(mode_of(s.dir / "a") == 0700);
  CHECK(mode_of(s.dir / "a" / "b") == 0700);
}

TEST_CASE("check_dir refuses a folder or parent that group or others can write", "[core]") {
  Scratch s;
  fs::create_directories(s.dir / "open" / "inner");
  chmod((s.dir / "open" / "inner").c_str(), 0700);
  chmod((s.dir / "open").c_str(), 0777);
  CHECK_THAT(sf::check_dir((s.dir / "open").string()).problem,
             Catch::Contains("writable by group or others") && Catch::Contains("0777"));
  // A private folder inside a world-writable (not root-sticky) one: the parent could rename it.
  CHECK_THAT(sf::check_dir((s.dir / "open" / "inner").string()).problem,
             Catch::Contains((s.dir / "open").string()));
  chmod((s.dir / "open").c_str(), 0770);
  CHECK_THAT(sf::check_dir((s.dir / "open").string()).problem, Catch::Contains("0770"));
  chmod((s.dir / "open").c_str(), 0755);
  CHECK(sf::check_dir((s.dir / "open" / "inner").string()).problem == "");
}

TEST_CASE("a root-owned sticky folder is trusted as a parent only", "[core]") {
  struct stat st {};
  if (lstat("/tmp", &st) != 0 || st.st_uid != 0 || !(st.st_mode & S_ISVTX) ||
      !(st.st_mode & S_IWOTH)) {
    SUCCEED("/tmp is not a root-owned sticky world-writable folder here");
    return;
  }
  CHECK_THAT(sf::check_dir("/tmp").problem, Catch::Contains("writable by group or others"));
  CHECK(sf::check_dir("/tmp", /*as_parent=*/true).problem == "");
}

TEST_CASE("check_dir follows a symlink and checks its target", "[core]") {
  Scratch s;
  fs::create_directories(s.dir / "shared");
  chmod((s.dir / "shared").c_str(), 0777);
  fs::create_directory_symlink(s.dir / "shared", s.dir / "link");
  CHECK_THAT(sf::check_dir((s.dir / "link").string()).problem,
             Catch::Contains("writable by group or others"));
  chmod((s.dir / "shared").c_str(), 0700);
  CHECK(sf::check_dir((s.dir / "link").string()).problem == "");
  fs::create_symlink(s.dir / "nowhere", s.dir / "dangling");
  CHECK(sf::check_dir((s.dir / "dangling").string()).problem != "");
}

TEST_CASE("check_dir refuses a folder owned by another user", "[core]") {
  if (geteuid() != 0) {
    SUCCEED("needs root to chown");
    return;
  }
  Scratch s;
  fs::create_directories(s.dir / "theirs");
  REQUIRE(chown((s.dir / "theirs").c_str(), 65534, 65534) == 0);
  CHECK_THAT(sf::check_dir((s.dir / "theirs").string()).problem,
             Catch::Contains("owned by another user (uid 65534)"));
}

TEST_CASE("read_file reads a regular file of the owner within the bound", "[core]") {
  Scratch s;
  write_text(s.dir / "f", "hello");
  chmod((s.dir / "f").c_str(), 0600);
  CHECK(sf::read_file((s.dir / "f").string(), 100, geteuid()) ==
        std::optional<std::string>("hello"));
  CHECK_FALSE(sf::read_file((s.dir / "f").string(), 4, geteuid()));        // larger than the bound
  CHECK_FALSE(sf::read_file((s.dir / "f").string(), 100, geteuid() + 1));  // another owner
  chmod((s.dir / "f").c_str(), 0620);
  CHECK_FALSE(sf::read_file((s.dir / "f").string(), 100, geteuid()));  // group-writable
  chmod((s.dir / "f").c_str(), 0640);
  CHECK_FALSE(sf::read_file((s.dir / "f").string(), 100, geteuid(), S_IRWXG | S_IRWXO));
  CHECK_FALSE(sf::read_file((s.dir / "missing").string(), 100, geteuid()));
}

TEST_CASE("read_file refuses symlinks, folders and FIFOs without blocking", "[core]") {
  Scratch s;
  write_text(s.dir / "target", "secret");
  fs::create_symlink(s.dir / "target", s.dir / "link");
  CHECK_FALSE(sf::read_file((s.dir / "link").string(), 100, geteuid()));
  fs::create_directory(s.dir / "folder");
  CHECK_FALSE(sf::read_file((s.dir / "folder").string(), 100, geteuid()));
  REQUIRE(mkfifo((s.dir / "fifo").c_str(), 0600) == 0);
  CHECK_FALSE(sf::read_file((s.dir / "fifo").string(), 100, geteuid()));  // returns at once
}

TEST_CASE("write_file_atomic replaces a planted symlink, never its target", "[core]") {
  Scratch s;
  write_text(s.dir / "victim", "precious");
  fs::create_symlink(s.dir / "victim", s.dir / "entry");
  mode_t old = umask(0);
  REQUIRE(sf::write_file_atomic((s.dir / "entry").string(), "new"));
  umask(old);
  CHECK(fs::is_regular_file(fs::symlink_status(s.dir / "entry")));
  CHECK(mode_of(s.dir / "entry") == 0600);
  CHECK(*sf::read_file((s.dir / "entry").string(), 100, geteuid()) == "new");
  std::ifstream v(s.dir / "victim");
  std::string text((std::istreambuf_iterator<char>(v)), {});
  CHECK(text == "precious");
  // No temporaries are left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(s.dir)) files += e.path().filename() != "victim";
  CHECK(files == 1);
}

TEST_CASE("write_new_file and publish_new_file never touch an existing path", "[core]") {
  Scratch s;
  write_text(s.dir / "victim", "precious");
  fs::create_symlink(s.dir / "victim", s.dir / "dump.txt");
  CHECK_FALSE(sf::write_new_file((s.dir / "dump.txt").string(), "x"));
  CHECK_FALSE(sf::publish_new_file((s.dir / "dump.txt").string(), "x"));
  CHECK(fs::file_size(s.dir / "victim") == 8);
  CHECK(sf::write_new_file((s.dir / "fresh.txt").string(), "x"));
  CHECK(mode_of(s.dir / "fresh.txt") == 0600);
  CHECK_FALSE(sf::write_new_file((s.dir / "fresh.txt").string(), "y"));
  CHECK(sf::publish_new_file((s.dir / "secret").string(), "abc"));
  CHECK(*sf::read_file((s.dir / "secret").string(), 10, geteuid()) == "abc");
}

TEST_CASE("make_unique_dir makes a fresh 0700 folder with an unpredictable name", "[core]") {
  Scratch s;
  std::string a = sf::make_unique_dir(s.dir.string(), "run-"),
              b = sf::make_unique_dir(s.dir.string(), "run-");
  REQUIRE(!a.empty());
  CHECK(a != b);
  CHECK(mode_of(a) == 0700);
  CHECK(sf::random_name().size() == 16);
  CHECK(sf::random_name() != sf::random_name());
  CHECK(sf::sanitize_name("../a b/c") == "___a_b_c");
}
