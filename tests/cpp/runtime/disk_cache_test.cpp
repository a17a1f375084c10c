// The one on-disk kernel cache (CPU objects and CUDA images): authenticated
// entries, bounded type-checked reads, private folders, LRU eviction.
#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/secure_fs.h"

namespace fs = std::filesystem;
namespace rt = tl::runtime;
using rt::EntryKind;

namespace {
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = tl::secure_fs::make_unique_dir(fs::temp_directory_path().string(), "tl_disk_cache_test-");
    REQUIRE(!dir.empty());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const std::string kKey = "0123456789abcdef0123456789abcdef";
const std::string kImage(
    "\x7f"
    "ELF some object bytes\0with a NUL",
    33);

void flip_byte(const std::string& path, long at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 1));
}
}  // namespace

TEST_CASE("an entry reads back as stored, per kind", "[runtime]") {
  Scratch s;
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 0);
  REQUIRE(cache.enabled());
  for (EntryKind kind : {EntryKind::CpuObject, EntryKind::CudaImage, EntryKind::TuneChoice}) {
    CHECK_FALSE(cache.load(kind, kKey));
    cache.store(kind, kKey, kImage);
    CHECK(cache.load(kind, kKey) == std::optional<std::string>(kImage));
  }
  CHECK(cache.path(EntryKind::CpuObject, kKey) == (s.dir / "c" / "cpu" / (kKey + ".o")).string());
  CHECK(cache.path(EntryKind::CudaImage, kKey) ==
        (s.dir / "c" / "cuda" / (kKey + ".cubin")).string());
  CHECK(cache.path(EntryKind::TuneChoice, kKey) ==
        (s.dir / "c" / "tune" / (kKey + ".tune")).string());
}

TEST_CASE("the cache folder, its subfolders and secret are private even under umask 000",
          "[runtime]") {
  Scratch s;
  mode_t old = umask(0);
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 0);
  cache.store(EntryKind::CpuObject, kKey, kImage);
  umask(old);
  REQUIRE(cache.enabled());
  auto mode = [](const fs::path& p) { return fs::status(p).permissions(); };
  CHECK(mode(s.dir / "c") == fs::perms::owner_all);
  CHECK(mode(s.dir / "c" / "cpu") == fs::perms::owner_all);
  CHECK(mode(s.dir / "c" / "secret") == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(mode(cache.path(EntryKind::CpuObject, kKey)) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(fs::file_size(s.dir / "c" / "secret") == 32);
}

TEST_CASE("an entry that was not written with this folder's secret is a miss", "[runtime]") {
  Scratch s;
  auto a = rt::DiskCache::open((s.dir / "a").string(), 0);
  auto b = rt::DiskCache::open((s.dir / "b").string(), 0);
  a.store(EntryKind::CpuObject, kKey, kImage);
  // The same bytes in another cache (another user's secret): never loaded.
  fs::copy_file(a.path(EntryKind::CpuObject, kKey), b.path(EntryKind::CpuObject, kKey));
  CHECK_FALSE(b.load(EntryKind::CpuObject, kKey));
  // Under another key or kind: the HMAC covers both.
  const std::string other = "ffff" + kKey.substr(4);
  fs::copy_file(a.path(EntryKind::CpuObject, kKey), a.path(EntryKind::CpuObject, other));
  CHECK_FALSE(a.load(EntryKind::CpuObject, other));
  fs::copy_file(a.path(EntryKind::CpuObject, kKey), a.path(EntryKind::CudaImage, kKey));
  CHECK_FALSE(a.load(EntryKind::CudaImage, kKey));
  SECTION("a flipped byte in the content or the MAC is a miss") {
    flip_byte(a.path(EntryKind::CpuObject, kKey), 60);
    CHECK_FALSE(a.load(EntryKind::CpuObject, kKey));
  }
  SECTION("a truncated entry is a miss") {
    fs::resize_file(a.path(EntryKind::CpuObject, kKey), 20);
    CHECK_FALSE(a.load(EntryKind::CpuObject, kKey));
  }
}

TEST_CASE("a folder, FIFO, symlink or huge file at an entry's path is a miss", "[runtime]") {
  Scratch s;
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 0);
  std::string p = cache.path(EntryKind::CpuObject, kKey);
  SECTION("folder") {
    fs::create_directory(p);
    CHECK_FALSE(cache.load(EntryKind::CpuObject, kKey));
  }
  SECTION("FIFO: returns at once instead of waiting for a writer") {
    REQUIRE(mkfifo(p.c_str(), 0600) == 0);
    CHECK_FALSE(cache.load(EntryKind::CpuObject, kKey));
  }
  SECTION("symlink to a valid entry") {
    cache.store(EntryKind::CpuObject, "aa" + kKey.substr(2), kImage);
    fs::create_symlink(cache.path(EntryKind::CpuObject, "aa" + kKey.substr(2)), p);
    CHECK_FALSE(cache.load(EntryKind::CpuObject, kKey));
  }
  SECTION("a 1 GB (sparse) file is refused without being read") {
    { std::ofstream(p) << "x"; }
    chmod(p.c_str(), 0600);
    fs::resize_file(p, 1ull << 30);
    CHECK_FALSE(cache.load(EntryKind::CpuObject, kKey));
  }
  SECTION("a key that is not a hash never becomes a path") {
    cache.store(EntryKind::CpuObject, "../../escape", kImage);
    CHECK_FALSE(fs::exists(s.dir / "escape.o"));
    CHECK_FALSE(cache.load(EntryKind::CpuObject, "../../escape"));
  }
}

TEST_CASE("a folder others can write is not used", "[runtime]") {
  Scratch s;
  fs::create_directory(s.dir / "open");
  chmod((s.dir / "open").c_str(), 0777);
  auto cache = rt::DiskCache::open((s.dir / "open").string(), 0);
  CHECK_FALSE(cache.enabled());
  cache.store(EntryKind::CpuObject, kKey, kImage);
  CHECK_FALSE(fs::exists(s.dir / "open" / "cpu"));
  CHECK_FALSE(fs::exists(s.dir / "open" / "secret"));
  CHECK_THAT(rt::disk_cache_info((s.dir / "open").string(), 0).problem,
             Catch::Contains("writable by group or others"));
  CHECK(rt::disk_cache_clear((s.dir / "open").string()) == -1);
}

TEST_CASE("a secret others can read disables the cache", "[runtime]") {
  Scratch s;
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 0);
  REQUIRE(cache.enabled());
  chmod((s.dir / "c" / "secret").c_str(), 0644);
  CHECK_FALSE(rt::DiskCache::open((s.dir / "c").string(), 0).enabled());
}

TEST_CASE("past the size cap the least recently used entries are evicted", "[runtime]") {
  Scratch s;
  std::string blob(10000, 'x');
  // Room for about three entries (each ~10 KB with its header).
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 35000);
  auto key = [](int i) { return std::string(31, 'a') + char('0' + i); };
  auto age = [&](int i, int seconds_ago) {
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= seconds_ago;
    t[1] = t[0];
    utimensat(AT_FDCWD, cache.path(EntryKind::CpuObject, key(i)).c_str(), t, 0);
  };
  for (int i = 0; i < 3; ++i) {
    cache.store(EntryKind::CpuObject, key(i), blob);
    age(i, 100 - i);  // 0 oldest
  }
  CHECK(cache.load(EntryKind::CpuObject, key(0)));  // now the most recently used
  cache.store(EntryKind::CpuObject, key(3), blob);
  CHECK(cache.load(EntryKind::CpuObject, key(0)));
  CHECK_FALSE(cache.load(EntryKind::CpuObject, key(1)));  // the least recently used
  CHECK(cache.load(EntryKind::CpuObject, key(3)));
  auto info = rt::disk_cache_info((s.dir / "c").string(), 35000);
  CHECK(info.bytes <= 35000);
  CHECK(info.cpu_entries >= 2);
}

TEST_CASE("discard and clear remove entries and keep the secret", "[runtime]") {
  Scratch s;
  auto cache = rt::DiskCache::open((s.dir / "c").string(), 0);
  cache.store(EntryKind::CpuObject, kKey, kImage);
  cache.store(EntryKind::CudaImage, kKey, kImage);
  cache.discard(EntryKind::CpuObject, kKey);
  CHECK_FALSE(cache.load(EntryKind::CpuObject, kKey));
  auto info = rt::disk_cache_info((s.dir / "c").string(), 0);
  CHECK(info.problem == "");
  CHECK(info.cpu_entries == 0);
  CHECK(info.cuda_entries == 1);
  CHECK(rt::disk_cache_clear((s.dir / "c").string()) == 1);
  CHECK(rt::disk_cache_info((s.dir / "c").string(), 0).cuda_entries == 0);
  CHECK(fs::exists(s.dir / "c" / "secret"));
}

TEST_CASE("an empty cache dir turns the cache off", "[runtime]") {
  auto cache = rt::DiskCache::open("", 0);
  CHECK_FALSE(cache.enabled());
  cache.store(EntryKind::CudaImage, kKey, kImage);
  CHECK_FALSE(cache.load(EntryKind::CudaImage, kKey));
}
