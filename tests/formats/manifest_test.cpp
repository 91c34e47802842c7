// manifest.json: round trip of every field (the whole device spec included) and the strict reader's errors.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/manifest.h"
#include "formats/ntff.h"
#include "sightline/error.h"

namespace sightline::formats {
namespace {

constexpr uint64_t kHash = 0x0123456789abcdefull;
constexpr uint64_t kOtherHash = 0xfedcba9876543210ull;

Manifest sample() {
  Manifest m;
  m.created_utc = "2026-01-31T12:34:56Z";
  m.modes = {"framework", "runtime", "device_instructions"};
  m.captured_cores = {0, 2};
  m.device = device::Spec::builtin("trn2");
  m.events = {.framework = 120, .runtime = 40, .hardware = 20, .instruction_records = 4000};
  m.dropped.framework = 1;
  m.dropped.per_core = {{.core = 0, .events = 5, .executions = 2}, {.core = 2, .events = 0, .executions = 0}};
  m.files = {{ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, 1234},
             {ManifestFileKind::system_trace, "system_trace.json", std::nullopt, std::nullopt, 0},
             {ManifestFileKind::neff, ntff_paired_neff_file_name(kHash), kHash, std::nullopt, 99},
             {ManifestFileKind::neff, ntff_paired_neff_file_name(kOtherHash), kOtherHash, std::nullopt, 98},
             {ManifestFileKind::ntff, ntff_file_name(kHash, 0), kHash, 0u, 0},
             {ManifestFileKind::ntff, ntff_file_name(kOtherHash, 2), kOtherHash, 2u, 0}};
  return m;
}

void expect_same_spec(const device::Spec& a, const device::Spec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.core_version, b.core_version);
  EXPECT_EQ(a.cores_per_instance, b.cores_per_instance);
  EXPECT_EQ(a.base_clock_ghz, b.base_clock_ghz);
  EXPECT_EQ(a.partitions, b.partitions);
  EXPECT_EQ(a.sbuf_bytes_per_partition, b.sbuf_bytes_per_partition);
  EXPECT_EQ(a.psum_bytes_per_partition, b.psum_bytes_per_partition);
  EXPECT_EQ(a.psum_banks, b.psum_banks);
  EXPECT_EQ(a.access_overhead_cycles, b.access_overhead_cycles);
  EXPECT_EQ(a.tensor.clock_ghz, b.tensor.clock_ghz);
  EXPECT_EQ(a.tensor.array_rows, b.tensor.array_rows);
  EXPECT_EQ(a.tensor.array_cols, b.tensor.array_cols);
  EXPECT_EQ(a.tensor.moving_free_max, b.tensor.moving_free_max);
  EXPECT_EQ(a.tensor.mm_init_interval_cycles, b.tensor.mm_init_interval_cycles);
  EXPECT_EQ(a.tensor.fp32_cost_factor, b.tensor.fp32_cost_factor);
  for (auto [x, y] : {std::pair{&a.vector, &b.vector}, {&a.scalar, &b.scalar}, {&a.gpsimd, &b.gpsimd}}) {
    EXPECT_EQ(x->clock_ghz, y->clock_ghz);
    EXPECT_EQ(x->elements_per_cycle_32bit, y->elements_per_cycle_32bit);
    EXPECT_EQ(x->elements_per_cycle_16bit, y->elements_per_cycle_16bit);
    EXPECT_EQ(x->static_overhead_cycles, y->static_overhead_cycles);
    EXPECT_EQ(x->accumulate_extra_cycles, y->accumulate_extra_cycles);
  }
  EXPECT_EQ(a.dma.queues, b.dma.queues);
  EXPECT_EQ(a.dma.fixed_cost_ns, b.dma.fixed_cost_ns);
  EXPECT_EQ(a.dma.queue_bytes_per_ns, b.dma.queue_bytes_per_ns);
  EXPECT_EQ(a.hbm.capacity_bytes, b.hbm.capacity_bytes);
  EXPECT_EQ(a.hbm.bytes_per_ns, b.hbm.bytes_per_ns);
  EXPECT_EQ(a.runtime.submission_ns, b.runtime.submission_ns);
  EXPECT_EQ(a.runtime.executable_switch_ns, b.runtime.executable_switch_ns);
  EXPECT_EQ(a.runtime.completion_ns, b.runtime.completion_ns);
  EXPECT_EQ(a.runtime.first_load_ns, b.runtime.first_load_ns);
}

std::string error_of(const std::string& text) {
  try {
    manifest_parse(text, "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The sample's JSON with one edit applied.
std::string edited(const std::function<void(nlohmann::ordered_json&)>& edit) {
  auto j = nlohmann::ordered_json::parse(manifest_serialize(sample()));
  edit(j);
  return j.dump();
}

TEST(Manifest, RoundTripKeepsEveryField) {
  const Manifest m = sample();
  const std::string text = manifest_serialize(m);
  const Manifest back = manifest_parse(text);
  EXPECT_EQ(back.format_version, kManifestVersion);
  EXPECT_EQ(back.sightline_version, sightline_version_string());
  EXPECT_FALSE(back.sightline_version.empty());
  EXPECT_EQ(back.created_utc, m.created_utc);
  EXPECT_EQ(back.modes, m.modes);
  EXPECT_EQ(back.captured_cores, m.captured_cores);
  expect_same_spec(back.device, m.device);
  EXPECT_EQ(back.events, m.events);
  EXPECT_EQ(back.dropped, m.dropped);
  EXPECT_EQ(back.dropped.total(), 8u);
  EXPECT_EQ(back.files, m.files);
  EXPECT_EQ(manifest_serialize(back), text);

  for (const char* spec : {"trn1", "trn2"}) {
    Manifest other = sample();
    other.device = device::Spec::builtin(spec);
    expect_same_spec(manifest_parse(manifest_serialize(other)).device, other.device);
  }
}

TEST(Manifest, JsonNamesTheSchemaFields) {
  const auto j = nlohmann::json::parse(manifest_serialize(sample()));
  EXPECT_EQ(j["format_version"], kManifestVersion);
  EXPECT_EQ(j["device"]["name"], "trn2");
  EXPECT_EQ(j["device"]["dma"]["queues"], 16);
  EXPECT_EQ(j["dropped"]["total"], 8);
  EXPECT_EQ(j["files"][2]["neff_hash"], "0123456789abcdef");
  EXPECT_EQ(j["files"][4]["core"], 0);
  EXPECT_FALSE(j["device"].contains("path"));  // no machine paths in a shareable profile
}

TEST(Manifest, NowIsIsoUtc) {
  const std::string now = manifest_now_utc();
  ASSERT_EQ(now.size(), 20u) << now;
  EXPECT_EQ(now[4], '-');
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now.back(), 'Z');
}

TEST(Manifest, UnknownVersionIsRefused) {
  const std::string e = error_of(edited([](auto& j) { j["format_version"] = 2; }));
  EXPECT_NE(e.find("format_version is 2, this build reads version 1"), std::string::npos) << e;
  EXPECT_NE(error_of(edited([](auto& j) { j["format_version"] = "1"; })).find("format_version"),
            std::string::npos);
}

TEST(Manifest, MissingRequiredFieldsAreNamed) {
  const std::pair<std::function<void(nlohmann::ordered_json&)>, const char*> cases[] = {
      {[](auto& j) { j.erase("format_version"); }, "$.format_version is missing"},
      {[](auto& j) { j.erase("modes"); }, "$.modes is missing"},
      {[](auto& j) { j["device"]["dma"].erase("queue_bytes_per_ns"); },
       "$.device.dma.queue_bytes_per_ns is missing"},
      {[](auto& j) { j["device"]["runtime"].erase("first_load_ns"); },
       "$.device.runtime.first_load_ns is missing"},
      {[](auto& j) { j["events"].erase("instruction_records"); }, "$.events.instruction_records is missing"},
      {[](auto& j) { j["dropped"]["per_core"][1].erase("executions"); },
       "$.dropped.per_core[1].executions is missing"},
      {[](auto& j) { j["files"][4].erase("core"); }, "needs a core"},
      {[](auto& j) { j["files"][2].erase("neff_hash"); }, "needs a neff_hash"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string e = error_of(edited(edit));
    EXPECT_NE(e.find(expected), std::string::npos) << "expected '" << expected << "' in: " << e;
    EXPECT_NE(e.find("m.json"), std::string::npos) << e;
  }
}

TEST(Manifest, WrongTypesAndInconsistenciesAreRefused) {
  const std::pair<std::function<void(nlohmann::ordered_json&)>, const char*> cases[] = {
      {[](auto& j) { j["events"]["framework"] = -1; }, "$.events.framework must be an unsigned integer"},
      {[](auto& j) { j["device"]["partitions"] = "128"; }, "$.device.partitions must be an unsigned integer"},
      {[](auto& j) { j["device"]["base_clock_ghz"] = nullptr; }, "$.device.base_clock_ghz must be a number"},
      {[](auto& j) { j["device"] = 3; }, "$.device must be an object"},
      {[](auto& j) { j["modes"] = {1}; }, "$.modes must hold strings"},
      {[](auto& j) { j["dropped"]["total"] = 9; }, "add up to 8"},
      {[](auto& j) { j["files"][0]["kind"] = "movie"; }, "expected one of trace, system_trace, neff, ntff"},
      {[](auto& j) { j["files"][2]["neff_hash"] = "0123"; }, "16 lowercase hex digits"},
      {[](auto& j) { j["files"][2]["path"] = "neff_0000000000000000.neff"; }, "not named"},
      {[](auto& j) { j["files"][0]["path"] = "../trace.json"; }, "'..' component"},
      {[](auto& j) { j["files"][0]["path"] = "/tmp/trace.json"; }, "not relative"},
      {[](auto& j) { j["files"][1]["path"] = "trace.json"; }, "listed twice"},
      {[](auto& j) { j["files"].erase(3); }, "pairs with neff_fedcba9876543210.neff, which is not listed"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string e = error_of(edited(edit));
    EXPECT_NE(e.find(expected), std::string::npos) << "expected '" << expected << "' in: " << e;
  }
  EXPECT_NE(error_of("{\"format_version\": 1,").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("$ must be an object"), std::string::npos);
}

// A manifest's device spec feeds the same arithmetic as a spec file (issue 21: negative clocks gave
// negative MFU, a zero bandwidth divides), so it is held to the same ranges.
TEST(Manifest, DeviceSpecValuesAreValidatedLikeASpecFile) {
  const std::pair<std::function<void(nlohmann::ordered_json&)>, const char*> cases[] = {
      {[](auto& j) { j["device"]["base_clock_ghz"] = -1.4; }, "$.device.base_clock_ghz is -1.4, must be a positive"},
      {[](auto& j) { j["device"]["tensor"]["clock_ghz"] = 0; }, "$.device.tensor.clock_ghz is 0, must be a positive"},
      {[](auto& j) { j["device"]["vector"]["clock_ghz"] = -2; }, "$.device.vector.clock_ghz"},
      {[](auto& j) { j["device"]["hbm"]["bytes_per_ns"] = 0; }, "$.device.hbm.bytes_per_ns is 0"},
      {[](auto& j) { j["device"]["dma"]["queue_bytes_per_ns"] = 0.0; }, "$.device.dma.queue_bytes_per_ns"},
      {[](auto& j) { j["device"]["dma"]["fixed_cost_ns"] = -5; },
       "$.device.dma.fixed_cost_ns is -5, must be a number >= 0"},
      {[](auto& j) { j["device"]["runtime"]["submission_ns"] = -1; }, "$.device.runtime.submission_ns"},
      {[](auto& j) { j["device"]["psum_banks"] = 0; }, "$.device.psum_banks is 0, must be in [1, 1024]"},
      {[](auto& j) { j["device"]["partitions"] = 0; }, "$.device.partitions is 0"},
      {[](auto& j) { j["device"]["dma"]["queues"] = 0; }, "$.device.dma.queues is 0"},
      {[](auto& j) { j["device"]["hbm"]["capacity_bytes"] = 0; }, "$.device.hbm.capacity_bytes is 0"},
      {[](auto& j) { j["device"]["tensor"]["array_rows"] = 4096; }, "cannot exceed $.device.partitions"},
      {[](auto& j) { j["device"]["host"]["copy_bytes_per_ns"] = 0; }, "$.device.host.copy_bytes_per_ns is 0"},
      {[](auto& j) { j["device"]["host"]["framework_op_ns"] = -3; }, "$.device.host.framework_op_ns is -3"},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string e = error_of(edited(edit));
    EXPECT_NE(e.find(expected), std::string::npos) << "expected '" << expected << "' in: " << e;
    EXPECT_NE(e.find("m.json"), std::string::npos) << e;
  }
}

TEST(Manifest, UnknownFieldsAreIgnored) {
  const Manifest back = manifest_parse(edited([](auto& j) { j["added_later"] = {{"x", 1}}; }));
  EXPECT_EQ(back.files, sample().files);
}

TEST(Manifest, WriterRefusesWhatTheReaderWould) {
  Manifest m = sample();
  m.files.push_back({ManifestFileKind::ntff, ntff_file_name(0x42, 1), 0x42, 1u, 0});
  EXPECT_THROW(manifest_serialize(m), Error);
  m = sample();
  m.files[0].path = "manifest.json";
  EXPECT_THROW(manifest_serialize(m), Error);
}

TEST(Manifest, SaveAndLoadFromFileOrDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "sightline_manifest_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = manifest_save(sample(), dir.string());
  EXPECT_EQ(std::filesystem::path(path).filename(), "manifest.json");
  EXPECT_EQ(manifest_load(path).files, sample().files);
  EXPECT_EQ(manifest_load(dir.string()).files, sample().files);
  std::filesystem::remove(path);
  try {
    manifest_load(dir.string());
    ADD_FAILURE() << "a directory without a manifest was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete export"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sightline::formats

namespace sightline::formats {
namespace {

// Found by manifest_fuzz: a number too large for any C++ type escaped the reader as nlohmann's
// out_of_range instead of a sightline::Error.
TEST(Manifest, NumbersTooLargeForAnyTypeAreANamedError) {
  std::string text = manifest_serialize(sample());
  text.replace(text.find("\"format_version\": 1"), std::string("\"format_version\": 1").size(),
               "\"format_version\": 80e793");
  const std::string e = error_of(text);
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

}  // namespace
}  // namespace sightline::formats

namespace sightline::formats {
namespace {

// Found by manifest_fuzz: a manifest from before the host model (no device.host) was read, but the
// writer then wrote host costs of 0, which its reader refuses. What the reader accepts, the writer
// writes back readable.
TEST(Manifest, AManifestWithoutHostCostsRoundTrips) {
  auto j = nlohmann::ordered_json::parse(manifest_serialize(sample()));
  j["device"].erase("host");
  const Manifest old = manifest_parse(j.dump(), "old.json");
  EXPECT_EQ(old.device.host.copy_bytes_per_ns, 0);
  const std::string text = manifest_serialize(old);
  EXPECT_NO_THROW(manifest_parse(text, "again.json"));
  EXPECT_EQ(manifest_serialize(manifest_parse(text, "again.json")), text);
}

// A merged profile (sightline merge): each rank's folder, and which rank a file under it belongs to.
TEST(Manifest, MergedRanksRoundTripAndNameTheirFiles) {
  Manifest m = sample();
  ManifestDistributed d;
  d.world_size = 2;
  d.ranks = {{.rank = 0, .folder = "rank0"}, {.rank = 1, .folder = "rank1"}};
  m.distributed = d;
  m.files.push_back({ManifestFileKind::neff, "rank1/" + ntff_paired_neff_file_name(kHash), kHash, std::nullopt, 99});
  const std::string text = manifest_serialize(m);
  const Manifest back = manifest_parse(text, "merged.json");
  ASSERT_TRUE(back.distributed.has_value());
  EXPECT_EQ(back.distributed->ranks, d.ranks);
  EXPECT_EQ(manifest_file_rank(back, back.files.back()), 1u);
  EXPECT_EQ(manifest_file_rank(back, back.files.front()), std::nullopt);  // trace.json: no rank's folder
  EXPECT_EQ(manifest_file_rank(sample(), sample().files.front()), std::nullopt);
  // Older manifests have no ranks; a rank beyond the world size or a folder that is a path is refused.
  auto j = nlohmann::ordered_json::parse(text);
  j["distributed"].erase("ranks");
  EXPECT_TRUE(manifest_parse(j.dump(), "old.json").distributed->ranks.empty());
  j = nlohmann::ordered_json::parse(text);
  j["distributed"]["ranks"][1]["rank"] = 2;
  EXPECT_THAT([&] { manifest_parse(j.dump(), "bad.json"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("rank 2 is not below the world size 2")));
  j = nlohmann::ordered_json::parse(text);
  j["distributed"]["ranks"][1]["folder"] = "a/b";
  EXPECT_THAT([&] { manifest_parse(j.dump(), "bad.json"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("is not one path component")));
  j = nlohmann::ordered_json::parse(text);
  j["distributed"]["ranks"][1]["folder"] = "rank0";
  EXPECT_THAT([&] { manifest_parse(j.dump(), "bad.json"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("listed twice")));
}

}  // namespace
}  // namespace sightline::formats
