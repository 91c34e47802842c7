// Atomic export of a profile directory: a finished export appears whole, a failed one leaves nothing, an
// earlier profile is replaced only once the new one is complete, and unrelated directories are never
// replaced.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "formats/manifest.h"
#include "formats/output_dir.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace {

namespace fs = std::filesystem;

class OutputDir : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("sightline_output_dir_test_{}",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Names in root_ other than the target itself: staging or set-aside directories left behind.
  std::vector<std::string> leftovers(const std::string& target_name) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_)) {
      if (e.path().filename() != target_name) out.push_back(e.path().filename().string());
    }
    return out;
  }

  static Manifest manifest_listing_trace(uint64_t bytes) {
    Manifest m;
    m.created_utc = manifest_now_utc();
    m.device = device::Spec::builtin("trn2");
    m.files = {{ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, bytes}};
    return m;
  }

  // A complete profile: trace.json, then the manifest last.
  static void write_profile(const fs::path& staging, const std::string& trace_text) {
    std::ofstream(staging / "trace.json") << trace_text;
    manifest_save(manifest_listing_trace(trace_text.size()), staging.string());
  }

  static std::string read(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  fs::path root_;
};

TEST_F(OutputDir, WritesIntoAStagingSiblingThenRenames) {
  const fs::path target = root_ / "profile";
  fs::path seen;
  output_dir_write(target.string(), [&](const fs::path& staging) {
    seen = staging;
    EXPECT_EQ(staging.parent_path(), target.parent_path());
    EXPECT_EQ(staging.filename().string().rfind("profile.tmp-", 0), 0u) << staging;
    EXPECT_FALSE(fs::exists(target));  // nothing at the target while the export runs
    write_profile(staging, "{\"traceEvents\": []}");
  });
  EXPECT_TRUE(output_dir_is_complete(target.string()));
  EXPECT_EQ(read(target / "trace.json"), "{\"traceEvents\": []}");
  EXPECT_FALSE(fs::exists(seen));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, ThrowingWriterLeavesNoTargetAndNoTemporary) {
  const fs::path target = root_ / "profile";
  EXPECT_THROW(output_dir_write(target.string(),
                                [&](const fs::path& staging) {
                                  std::ofstream(staging / "trace.json") << "{";
                                  throw Error("disk went away");
                                }),
               Error);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, ThrowingWriterKeepsThePreviousProfile) {
  const fs::path target = root_ / "profile";
  output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "old"); });
  EXPECT_THROW(output_dir_write(target.string(), [](const fs::path&) { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_EQ(read(target / "trace.json"), "old");
  EXPECT_TRUE(output_dir_is_complete(target.string()));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, ReplacesAnEarlierProfileWhole) {
  const fs::path target = root_ / "profile";
  output_dir_write(target.string(), [](const fs::path& s) {
    write_profile(s, "old");
    std::ofstream(s / "stale.bin") << "only in the old export";
  });
  output_dir_write((target.string() + "/"), [](const fs::path& s) { write_profile(s, "new"); });
  EXPECT_EQ(read(target / "trace.json"), "new");
  EXPECT_FALSE(fs::exists(target / "stale.bin"));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, WriterWithoutManifestIsAnIncompleteExport) {
  const fs::path target = root_ / "profile";
  try {
    output_dir_write(target.string(), [](const fs::path& s) { std::ofstream(s / "trace.json") << "{}"; });
    ADD_FAILURE() << "an export without manifest.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrote no manifest.json"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, ManifestListingMissingOrResizedFilesIsRefused) {
  const fs::path target = root_ / "profile";
  EXPECT_THROW(
      output_dir_write(target.string(),
                       [](const fs::path& s) { manifest_save(manifest_listing_trace(0), s.string()); }),
      Error);
  EXPECT_THROW(output_dir_write(target.string(),
                                [](const fs::path& s) {
                                  std::ofstream(s / "trace.json") << "{}";
                                  manifest_save(manifest_listing_trace(99), s.string());
                                }),
               Error);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, UnrelatedDirectoryIsNeverReplaced) {
  const fs::path target = root_ / "photos";
  fs::create_directories(target);
  std::ofstream(target / "holiday.jpg") << "precious";
  try {
    output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "x"); });
    ADD_FAILURE() << "replaced a directory that is not a profile";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a sightline profile directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read(target / "holiday.jpg"), "precious");
  EXPECT_TRUE(leftovers("photos").empty());

  const fs::path file = root_ / "afile";
  std::ofstream(file) << "x";
  EXPECT_THROW(output_dir_write(file.string(), [](const fs::path& s) { write_profile(s, "x"); }), Error);
}

TEST_F(OutputDir, EmptyDirectoryIsFilledAndParentsAreCreated) {
  const fs::path empty = root_ / "empty";
  fs::create_directories(empty);
  output_dir_write(empty.string(), [](const fs::path& s) { write_profile(s, "a"); });
  EXPECT_TRUE(output_dir_is_complete(empty.string()));
  const fs::path nested = root_ / "a" / "b" / "c";
  output_dir_write(nested.string(), [](const fs::path& s) { write_profile(s, "b"); });
  EXPECT_TRUE(output_dir_is_complete(nested.string()));
}

TEST_F(OutputDir, IsCompleteNeedsAValidManifest) {
  EXPECT_FALSE(output_dir_is_complete((root_ / "missing").string()));
  fs::create_directories(root_ / "half");
  std::ofstream(root_ / "half" / "trace.json") << "{}";
  EXPECT_FALSE(output_dir_is_complete((root_ / "half").string()));
  std::ofstream(root_ / "half" / "manifest.json") << "{\"format_version\": 1";  // cut short
  EXPECT_FALSE(output_dir_is_complete((root_ / "half").string()));
}

TEST_F(OutputDir, DurableWriteWritesEveryByte) {
  std::vector<uint8_t> bytes(100000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  write_file_durably(root_ / "blob", bytes);
  EXPECT_EQ(fs::file_size(root_ / "blob"), bytes.size());
  EXPECT_THROW(write_file_durably(root_ / "no" / "such" / "blob", bytes), Error);
}

}  // namespace
}  // namespace sightline::formats
