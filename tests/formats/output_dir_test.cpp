// Atomic export of a profile directory: a finished export appears whole, a failed one leaves nothing, an
// earlier profile is replaced only once the new one is complete, and unrelated directories are never
// replaced.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "device/test_programs.h"
#include "formats/manifest.h"
#include "formats/neff.h"
#include "formats/ntff.h"
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
    std::ofstream(s / "trace.json") << "old";
    std::ofstream(s / "system_trace.json") << "only in the old export";
    Manifest m = manifest_listing_trace(3);
    m.files.push_back({ManifestFileKind::system_trace, "system_trace.json", std::nullopt, std::nullopt, 22});
    manifest_save(m, s.string());
  });
  const OutputDirResult result =
      output_dir_write((target.string() + "/"), [](const fs::path& s) { write_profile(s, "new"); });
  EXPECT_EQ(read(target / "trace.json"), "new");
  EXPECT_FALSE(fs::exists(target / "system_trace.json"));
  EXPECT_TRUE(result.notes.empty());
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

// Issue 21 item 4: a full disk must make the export fail, never leave a 0-byte file behind a success.
// /dev/full fails every write with ENOSPC; a symlink to it stands for a file on a full disk.
TEST_F(OutputDir, FullDiskFailsTheNtffAndNeffWriters) {
  NtffTrace trace;
  trace.neff_hash = 0x0123456789abcdefull;
  fs::create_symlink("/dev/full", root_ / ntff_file_name(trace.neff_hash, trace.core));
  try {
    ntff_save(trace, root_.string());
    ADD_FAILURE() << "an NTFF written to a full disk was reported as saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  const device::Executable exe = device::testing::matmul_program(128, 128, 64);
  fs::create_symlink("/dev/full", root_ / neff_file_name(exe));
  EXPECT_THROW(neff_save(exe, root_.string()), Error);
  EXPECT_THROW(write_file_durably(root_ / neff_file_name(exe), std::vector<uint8_t>(10)), Error);
}

TEST_F(OutputDir, FullDiskDuringExportLeavesNoProfileAndKeepsThePreviousOne) {
  const fs::path target = root_ / "profile";
  output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "old"); });
  NtffTrace trace;
  trace.neff_hash = 0x0123456789abcdefull;
  EXPECT_THROW(output_dir_write(target.string(),
                                [&](const fs::path& s) {
                                  write_profile(s, "new");
                                  fs::create_symlink("/dev/full", s / ntff_file_name(trace.neff_hash, 0));
                                  ntff_save(trace, s.string());
                                }),
               Error);
  EXPECT_EQ(read(target / "trace.json"), "old");
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, EmptyListedFileIsRefusedEvenWhenTheManifestSaysZeroBytes) {
  // What the issue saw: an unchecked flush left trace files of 0 bytes and a manifest saying `bytes: 0`.
  const fs::path target = root_ / "profile";
  try {
    output_dir_write(target.string(), [](const fs::path& s) {
      std::ofstream(s / "trace.json").flush();
      manifest_save(manifest_listing_trace(0), s.string());
    });
    ADD_FAILURE() << "an export with an empty trace.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'trace.json' is empty"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(leftovers("profile").empty());
}

// The pid of a process that has exited: leftovers named with it belong to no running export.
static long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// Issue 21 item 4: a kill between the two renames of a replace left `naive.old-*` and `naive.tmp-*` and no
// profile, never recovered. The leftovers are made by hand as the killed process would have left them.
TEST_F(OutputDir, KillBetweenRenamesIsRecoveredOnOpen) {
  const fs::path target = root_ / "profile";
  const std::string id = fmt::format("{}-7", dead_pid());
  const fs::path old_dir = root_ / ("profile.old-" + id);
  const fs::path new_dir = root_ / ("profile.tmp-" + id);
  fs::create_directories(old_dir);
  fs::create_directories(new_dir);
  write_profile(old_dir, "old");
  write_profile(new_dir, "new");
  EXPECT_TRUE(output_dir_is_complete(target.string()));
  EXPECT_EQ(read(target / "trace.json"), "new");  // the new one was validated before the old one moved
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, KillBetweenRenamesIsRecoveredOnTheNextExport) {
  const fs::path target = root_ / "profile";
  const long pid = dead_pid();
  // The killed export's staging directory was not finished: the previous profile goes back, then the
  // next export replaces it; a stray staging directory of another dead export is removed.
  const fs::path old_dir = root_ / fmt::format("profile.old-{}-3", pid);
  fs::create_directories(old_dir);
  write_profile(old_dir, "old");
  fs::create_directories(root_ / fmt::format("profile.tmp-{}-3", pid));
  std::ofstream(root_ / fmt::format("profile.tmp-{}-3", pid) / "trace.json") << "{";
  fs::create_directories(root_ / fmt::format("profile.tmp-{}-9", pid));
  const std::vector<std::string> notes = output_dir_recover(target.string());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("restored the previous profile"), std::string::npos) << notes[0];
  EXPECT_EQ(read(target / "trace.json"), "old");
  EXPECT_TRUE(leftovers("profile").empty());

  fs::create_directories(root_ / fmt::format("profile.tmp-{}-4", pid));
  output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "next"); });
  EXPECT_EQ(read(target / "trace.json"), "next");
  EXPECT_TRUE(leftovers("profile").empty());
}

TEST_F(OutputDir, LeftoversOfARunningExportAreLeftAlone) {
  // pid 1 is always running: its staging directory may be an export in progress.
  const fs::path live = root_ / "profile.tmp-1-0";
  fs::create_directories(live);
  std::ofstream(live / "trace.json") << "{";
  output_dir_write((root_ / "profile").string(), [](const fs::path& s) { write_profile(s, "x"); });
  EXPECT_TRUE(fs::exists(live / "trace.json"));
  EXPECT_EQ(leftovers("profile"), std::vector<std::string>{"profile.tmp-1-0"});
}

// Issue 21 item 4: exporting over a profile silently deleted a user's extra file in it. Files the exporter
// did not write are kept (in `<dir>.kept-*`, with a note), never deleted.
TEST_F(OutputDir, ReplacingKeepsFilesTheExporterDidNotWrite) {
  const fs::path target = root_ / "profile";
  output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "old"); });
  std::ofstream(target / "notes.txt") << "my analysis";
  fs::create_directories(target / "plots");
  std::ofstream(target / "plots" / "a.svg") << "<svg/>";
  const OutputDirResult result =
      output_dir_write(target.string(), [](const fs::path& s) { write_profile(s, "new"); });
  EXPECT_EQ(read(target / "trace.json"), "new");
  const std::vector<std::string> rest = leftovers("profile");
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].rfind("profile.kept-", 0), 0u) << rest[0];
  const fs::path kept = root_ / rest[0];
  EXPECT_EQ(read(kept / "notes.txt"), "my analysis");
  EXPECT_EQ(read(kept / "plots" / "a.svg"), "<svg/>");
  EXPECT_FALSE(fs::exists(kept / "trace.json"));     // what the exporter wrote is gone
  EXPECT_FALSE(fs::exists(kept / "manifest.json"));  // so the kept directory never looks like a profile
  ASSERT_EQ(result.notes.size(), 1u);
  EXPECT_NE(result.notes[0].find("notes.txt, plots"), std::string::npos) << result.notes[0];
  EXPECT_NE(result.notes[0].find(kept.string()), std::string::npos) << result.notes[0];
}

TEST_F(OutputDir, InterruptedReplaceKeepsTheUserFilesOfTheOldProfile) {
  const fs::path target = root_ / "profile";
  const std::string id = fmt::format("{}-1", dead_pid());
  const fs::path old_dir = root_ / ("profile.old-" + id);
  fs::create_directories(old_dir);
  write_profile(old_dir, "old");
  std::ofstream(old_dir / "notes.txt") << "mine";
  fs::create_directories(root_ / ("profile.tmp-" + id));
  write_profile(root_ / ("profile.tmp-" + id), "new");
  const std::vector<std::string> notes = output_dir_recover(target.string());
  EXPECT_EQ(notes.size(), 2u);
  EXPECT_EQ(read(target / "trace.json"), "new");
  EXPECT_EQ(read(root_ / ("profile.kept-" + id) / "notes.txt"), "mine");
  EXPECT_EQ(leftovers("profile"), std::vector<std::string>{"profile.kept-" + id});
}

// Issue 16: the server's uploads write through the same writer, streaming. A file arrives in pieces, the
// staging directory vanishes unless committed, commit_new() never replaces anything, and a commit checks
// the manifest as output_dir_write does.
TEST_F(OutputDir, StreamingStagingCommitsNewProfilesAndNeverReplaces) {
  const fs::path target = root_ / "profile";
  const std::string manifest = manifest_serialize(manifest_listing_trace(7));
  {
    OutputDirStaging staging(target.string(), OutputDirReplace::never);
    EXPECT_EQ(staging.path().parent_path(), root_);
    EXPECT_TRUE(output_dir_is_sibling_name(staging.path().filename().string()));
    staging.begin_file("trace.json");
    staging.append("{\"a\"");
    staging.append(":1}");
    EXPECT_EQ(read(staging.path() / "trace.json"), "{\"a\":1}");
    EXPECT_THROW(staging.begin_file("trace.json"), Error);  // exists already
    EXPECT_THROW(staging.begin_file("../x"), Error);
    EXPECT_THROW(staging.validate(), Error);  // no manifest yet
  }
  EXPECT_TRUE(leftovers("profile").empty());  // not committed: removed
  EXPECT_FALSE(fs::exists(target));

  auto stream_profile = [&](OutputDirStaging& staging, std::string_view trace) {
    staging.begin_file("trace.json");
    staging.append(trace);
    staging.begin_file(std::string(kManifestFileName));
    staging.append(manifest);
  };
  OutputDirStaging first(target.string(), OutputDirReplace::never);
  stream_profile(first, "{\"a\":1}");
  EXPECT_TRUE(first.commit_new());
  EXPECT_TRUE(output_dir_is_complete(target.string()));
  EXPECT_EQ(read(target / "trace.json"), "{\"a\":1}");
  EXPECT_THROW(first.commit(), Error);  // never replaces

  {
    OutputDirStaging second(target.string(), OutputDirReplace::never);
    stream_profile(second, "{\"b\":2}");
    EXPECT_FALSE(second.commit_new());  // something is there: refused, nothing replaced
  }
  EXPECT_EQ(read(target / "trace.json"), "{\"a\":1}");
  EXPECT_TRUE(leftovers("profile").empty());

  OutputDirStaging wrong_size((root_ / "other").string(), OutputDirReplace::never);
  stream_profile(wrong_size, "{}");  // the manifest says 7 bytes
  EXPECT_THROW(wrong_size.commit_new(), Error);
  EXPECT_FALSE(fs::exists(root_ / "other"));
}

TEST_F(OutputDir, RecoverAllResolvesTheLeftoversOfEveryProfileInADirectory) {
  const std::string dead = fmt::format("{}-3", dead_pid());
  for (const std::string& name : std::vector<std::string>{"a.tmp-" + dead, "b.tmp-" + dead, "c.tmp-1-0"}) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "trace.json") << "{";
  }
  fs::create_directories(root_ / ".hidden");
  (void)output_dir_recover_all(root_.string());
  std::vector<std::string> rest = leftovers("");
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(rest, (std::vector<std::string>{".hidden", "c.tmp-1-0"}));  // pid 1 runs: left alone
  EXPECT_FALSE(output_dir_is_sibling_name("a.tmp-1"));
  EXPECT_FALSE(output_dir_is_sibling_name(".tmp-1-2"));
  EXPECT_TRUE(output_dir_is_sibling_name("a.kept-12-0"));
}

}  // namespace
}  // namespace sightline::formats
