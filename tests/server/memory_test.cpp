// Memory that reading a large trace.json takes (issue 21): validating an upload holds a bounded
// buffer, not the upload (it held about 13 times it), and reading a trace for analysis, as
// `sightline view` and `table` do, holds about what the trace keeps, not a document of the whole
// file (about 10 times it). Measured as the growth of the process's peak resident memory (VmHWM,
// reset through /proc/self/clear_refs) over one call.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "analysis/trace_json.h"
#include "sightline/device/spec.h"
#include "formats/manifest.h"
#include "server/profile_index.h"
#include "server/profile_store.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;

// Peak memory is not what sanitizers' allocators report: their quarantine keeps freed memory.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

uint64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// The growth of peak resident memory while `work` runs; nullopt when the peak cannot be reset.
template <typename Work>
std::optional<uint64_t> peak_growth(Work&& work) {
  const uint64_t before = status_bytes("VmRSS");
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    if (!clear.flush()) return std::nullopt;
  }
  work();
  const uint64_t peak = status_bytes("VmHWM");
  return peak > before ? peak - before : 0;
}

class TraceMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = fs::temp_directory_path() / fmt::format("sightline_memory_test_{}", ::getpid());
    fs::remove_all(source_);
    fs::create_directories(source_);
    // About 64 MB: framework ops on one thread, back to back, as the exporter writes them.
    std::FILE* out = std::fopen((source_ / "trace.json").c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::fputs("{\"traceEvents\": [\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"host/1/framework/TID:1\"}}", out);
    for (int i = 0; i < 560'000; ++i) {
      std::fprintf(out, ",\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mul\", \"pid\": 1, \"tid\": 1, "
                        "\"ts\": %d.000, \"dur\": 1.500, \"args\": {\"External id\": %d}}", 2 * i, i + 1);
    }
    std::fputs("\n], \"baseTimeNanoseconds\": 0}\n", out);
    ASSERT_EQ(std::fclose(out), 0);
    trace_bytes_ = fs::file_size(source_ / "trace.json");
    formats::Manifest manifest;
    manifest.created_utc = formats::manifest_now_utc();
    manifest.device = device::Spec::builtin("trn2");
    manifest.files = {{formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, trace_bytes_}};
    formats::manifest_save(manifest, source_.string());
  }
  static void TearDownTestSuite() { fs::remove_all(source_); }

  void SetUp() override {
    if (kSanitized) GTEST_SKIP() << "peak memory under a sanitizer's allocator is not the program's";
  }

  static fs::path source_;
  static uint64_t trace_bytes_;
};

fs::path TraceMemoryTest::source_;
uint64_t TraceMemoryTest::trace_bytes_ = 0;

TEST_F(TraceMemoryTest, ValidatingAnUploadHoldsABoundedBufferNotTheUpload) {
  const fs::path root = source_.string() + "_root";
  fs::remove_all(root);
  fs::create_directories(root);
  ProfileStore store(root);
  auto staging = store.begin_upload("large");
  for (const char* name : {"manifest.json", "trace.json"}) {
    staging->begin_file(name);
    std::ifstream in(source_ / name, std::ios::binary);
    std::string chunk(size_t{1} << 20, '\0');
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      staging->append(std::string_view(chunk.data(), static_cast<size_t>(in.gcount())));
    }
  }
  const auto growth = peak_growth([&] { store.finish_upload(std::move(staging)); });
  EXPECT_TRUE(fs::exists(root / "large" / "trace.json"));
  fs::remove_all(root);
  if (!growth) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak here";
  // Before: the whole analysis and index of the upload, about 13 times its size.
  EXPECT_LT(*growth, trace_bytes_ / 2) << fmt::format("validating {} MB held {} MB", trace_bytes_ >> 20, *growth >> 20);
}

TEST_F(TraceMemoryTest, ValidatingATraceChecksWithoutKeeping) {
  const std::string path = (source_ / "trace.json").string();
  const auto growth = peak_growth([&] {
    analysis::trace_json_validate_file(path, "large/trace.json");
    validate_trace_file(path, "large/trace.json");
  });
  if (!growth) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak here";
  EXPECT_LT(*growth, uint64_t{48} << 20) << fmt::format("{} MB", *growth >> 20);
}

TEST_F(TraceMemoryTest, ReadingATraceHoldsWhatItKeepsNotADocumentOfTheFile) {
  const std::string path = (source_ / "trace.json").string();
  size_t events = 0;
  const auto growth = peak_growth([&] { events = analysis::trace_json_load(path).events.size(); });
  EXPECT_EQ(events, 560'000u);
  if (!growth) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak here";
  // Before: the text, a copy of it and a document of it, 17.7 times this file (1343 MB). Now the
  // events read (2.2 times this file of small events) and, for a moment, what profiler::build_trace
  // holds while it orders them (about as much again, twice): 6.5 times.
  EXPECT_LT(*growth, 9 * trace_bytes_) << fmt::format("reading {} MB held {} MB", trace_bytes_ >> 20, *growth >> 20);
}

// The upload validator's streaming check accepts exactly what the index loads, for layouts where a
// cut between events could go wrong (runs cut every 4 bytes here, so every input is cut often).
TEST(StreamingTraceCheck, AgreesWithTheIndexWhereverItCuts) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("sightline_streaming_check_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  formats::Manifest manifest;
  manifest.created_utc = formats::manifest_now_utc();
  manifest.device = device::Spec::builtin("trn2");
  manifest.files = {{formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, 0}};
  formats::manifest_save(manifest, dir.string());
  const std::string event = R"({"ph": "X", "cat": "cpu_op", "name": "a,]}", "pid": 1, "tid": 1, "ts": 1, "dur": 2})";
  const std::vector<std::pair<std::string, bool>> cases = {
      {"{\"traceEvents\": [" + event + ", " + event + "]}", true},
      {"\xEF\xBB\xBF{\"traceEvents\": [" + event + "]}", true},
      {"[" + event + ", " + event + "]", true},
      {"{\"x\": [1, {\"traceEvents\": []}], \"trace\\u0045vents\": [" + event + "]}", true},
      {"{\"traceEvents\": [" + event + ", " + event + ",]}", false},            // trailing comma
      {"{\"traceEvents\": [" + event + ", " + event, false},                     // truncated in the array
      {"{\"traceEvents\": [" + event + ",, " + event + "]}", false},            // empty element
      {"{\"traceEvents\": [" + event + "]} []", false},                          // trailing content
      {"{\"traceEvents\": [{\"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": -1}]}", false},
      {"{\"traceEvents\": [[[[\"]\", 1]]], " + event + "]}", true},
      {"{\"other\": [" + event + "]}", false},                                   // no traceEvents
      {"{\"traceEvents\": [" + event + "}]}", false},                            // unbalanced
  };
  for (const auto& [text, valid] : cases) {
    std::ofstream(dir / "trace.json", std::ios::binary | std::ios::trunc) << text;
    bool loaded = true, checked = true;
    try {
      (void)ProfileIndex::load(dir);
    } catch (const RequestError&) {
      loaded = false;
    }
    try {
      validate_trace_file(dir / "trace.json", "check/trace.json", 4);
    } catch (const RequestError&) {
      checked = false;
    }
    EXPECT_EQ(loaded, valid) << text;
    EXPECT_EQ(checked, loaded) << text;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sightline::server
