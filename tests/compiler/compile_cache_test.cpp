// The disk cache of compiled device programs: hits across functions, corruption recovery, concurrent
// compiles into one directory.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "formats/neff.h"
#include "neuron/neuron.h"
#include "programs.h"

namespace sightline {
namespace {

namespace fs = std::filesystem;
using compiler::testing::expect_close;
using compiler::testing::naive_rms_norm;
using ::testing::HasSubstr;

const Device kCore0 = Device::parse("neuron:0");

// A fresh cache directory per test, removed afterwards.
class DiskCache : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("sightline_compile_cache_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CompiledFunction compiled_rms_norm() const {
    CompileOptions options;
    options.cache_dir = dir_.string();
    return compile(&naive_rms_norm, options);
  }

  // The files in the cache directory, temporaries included.
  std::vector<fs::path> entries() const {
    std::vector<fs::path> files;
    if (!fs::exists(dir_)) return files;
    for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path());
    return files;
  }

  fs::path dir_;
  Generator g_{31};
  const Tensor x_ = randn({130, 200}, {}, &g_).to(kCore0);
  const Tensor w_ = rand({200}, {}, &g_).to(kCore0);
};

TEST_F(DiskCache, SecondFunctionReadsTheFirstOnesEntry) {
  const CompiledFunction first = compiled_rms_norm(), second = compiled_rms_norm();
  const Tensor a = first(x_, w_);
  EXPECT_EQ(first.stats().lowerings, 1);
  EXPECT_EQ(first.stats().disk_cache_hits, 0);
  ASSERT_EQ(entries().size(), 1u);
  EXPECT_EQ(entries()[0].extension(), ".neff");
  const Tensor b = second(x_, w_);
  EXPECT_EQ(second.stats().lowerings, 0);
  EXPECT_EQ(second.stats().disk_cache_hits, 1);
  expect_close(b, a, 0.0, 0.0);
  expect_close(b, naive_rms_norm(x_, w_));
}

TEST_F(DiskCache, CorruptEntryIsRebuiltWithAWarning) {
  (void)compiled_rms_norm()(x_, w_);
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << "not a neff file";
  const CompiledFunction rebuilt = compiled_rms_norm();
  ::testing::internal::CaptureStderr();
  const Tensor y = rebuilt(x_, w_);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(warning, HasSubstr("warning: compile cache entry"));
  EXPECT_THAT(warning, HasSubstr("unusable"));
  EXPECT_THAT(warning, HasSubstr("rebuilding it"));
  EXPECT_EQ(rebuilt.stats().lowerings, 1);
  expect_close(y, naive_rms_norm(x_, w_));
  // The entry was rewritten and reads back.
  EXPECT_NO_THROW((void)formats::neff_load(entry.string()));
  const CompiledFunction reader = compiled_rms_norm();
  (void)reader(x_, w_);
  EXPECT_EQ(reader.stats().disk_cache_hits, 1);
}

TEST_F(DiskCache, TwoThreadsCompileIntoOneDirectory) {
  const Tensor expected = naive_rms_norm(x_, w_);
  for (int round = 0; round < 2; ++round) {
    Tensor results[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] { results[t] = compiled_rms_norm()(x_, w_); });
    }
    for (std::thread& t : threads) t.join();
    for (const Tensor& r : results) expect_close(r, expected);
    const std::vector<fs::path> files = entries();
    ASSERT_EQ(files.size(), 1u) << "a temporary file was left behind";
    EXPECT_NO_THROW((void)formats::neff_load(files[0].string()));
  }
}

}  // namespace
}  // namespace sightline
