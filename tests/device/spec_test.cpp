#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "sightline/device/spec.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string trn2_text() { return read_text(std::string(SIGHTLINE_SPECS_DIR) + "/trn2.json"); }

// Parses `text` and returns the error message (empty if it parsed).
std::string parse_error(const std::string& text) {
  try {
    Spec::parse(text, "edited.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(DeviceSpec, BuiltinTrn2IsNeuronCoreV3) {
  const Spec s = Spec::builtin();
  EXPECT_EQ(s.name, "trn2");
  EXPECT_EQ(s.core_version, "NeuronCore-v3");
  EXPECT_EQ(s.partitions, 128u);
  EXPECT_EQ(s.sbuf_bytes(), 28ull << 20);
  EXPECT_EQ(s.psum_bank_bytes(), 2048u);
  EXPECT_DOUBLE_EQ(s.tensor.clock_ghz, 2.4);
  EXPECT_EQ(s.tensor.mm_init_interval_cycles, 64u);
  EXPECT_EQ(s.dma.queues, 16u);
  EXPECT_EQ(s.hbm.capacity_bytes, 12ull << 30);
  EXPECT_EQ(s.cores_per_instance, 8u);
  EXPECT_GT(s.runtime.first_load_ns, s.runtime.submission_ns);
}

TEST(DeviceSpec, BuiltinTrn1IsNeuronCoreV2) {
  const Spec s = Spec::builtin("trn1");
  EXPECT_EQ(s.core_version, "NeuronCore-v2");
  EXPECT_EQ(s.sbuf_bytes(), 24ull << 20);
  EXPECT_DOUBLE_EQ(s.tensor.clock_ghz, 2.8);
  EXPECT_DOUBLE_EQ(s.vector.clock_ghz, 1.12);
  EXPECT_EQ(s.cores_per_instance, 2u);
}

TEST(DeviceSpec, UnknownBuiltinListsTheValidOnes) {
  try {
    Spec::builtin("trn9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trn2"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("trn1"), std::string::npos);
  }
}

TEST(DeviceSpec, MissingFileIsAnError) { EXPECT_THROW(Spec::load("no/such/spec.json"), Error); }

TEST(DeviceSpec, UserSpecParses) {
  const Spec s = Spec::parse(replace(trn2_text(), "\"value\": 362", "\"value\": 500"), "mine.json");
  EXPECT_DOUBLE_EQ(s.hbm.bytes_per_ns, 500);
  EXPECT_EQ(s.path, "mine.json");
}

TEST(DeviceSpec, ValidationNamesFieldAndFile) {
  std::string e = parse_error(replace(trn2_text(), "\"value\": 0.96", "\"value\": -1"));
  EXPECT_NE(e.find("edited.json"), std::string::npos) << e;
  EXPECT_NE(e.find("vector.clock_ghz"), std::string::npos) << e;

  e = parse_error(replace(trn2_text(), "\"banks\"", "\"bank_count\""));
  EXPECT_NE(e.find("psum.banks"), std::string::npos) << e;

  e = parse_error(replace(trn2_text(), "\"source\": \"docs/hardware-model.md §1.3: 128 partitions [A2]\"",
                          "\"source\": \"\""));
  EXPECT_NE(e.find("partitions"), std::string::npos) << e;
  EXPECT_NE(e.find("source"), std::string::npos) << e;

  e = parse_error(replace(trn2_text(), "\"value\": 128, \"source\": \"docs/hardware-model.md §1.3",
                          "\"value\": 12.5, \"source\": \"docs/hardware-model.md §1.3"));
  EXPECT_NE(e.find("integer"), std::string::npos) << e;

  e = parse_error(replace(trn2_text(), "\"runtime\": {",
                          "\"typo\": {\"value\": 1, \"source\": \"x\"},\n \"runtime\": {"));
  EXPECT_NE(e.find("unknown field 'typo'"), std::string::npos) << e;

  e = parse_error("{ not json");
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

}  // namespace
}  // namespace sightline::device

namespace sightline::device {
namespace {

// Found by manifest_fuzz (the same reader shape): a number too large for any type is a named error.
TEST(DeviceSpec, NumbersTooLargeForAnyTypeAreANamedError) {
  const std::string e = parse_error(replace(trn2_text(), "\"value\": 0.96", "\"value\": 96e9999"));
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
}

}  // namespace
}  // namespace sightline::device

namespace sightline::device {

// The instance's chips and their links (docs/hardware-model.md §1.8) are optional in a spec file: one
// written before them reads as one chip without chip-to-chip links.
TEST(DeviceSpec, ChipLinksAreOptional) {
  const Spec trn2 = Spec::builtin("trn2");
  EXPECT_EQ(trn2.collective.chips_per_instance, 16u);
  EXPECT_EQ(trn2.collective.chip_link_bytes_per_ns, 320);
  std::string text = trn2_text();
  const auto at = text.find("\n    \"chips_per_instance\"");
  ASSERT_NE(at, std::string::npos);
  const auto end = text.find("\n  },", at);
  ASSERT_NE(end, std::string::npos);
  text.erase(at, end - at);
  text.erase(text.rfind(',', at), 1);  // the comma after step_latency_ns
  const Spec old = Spec::parse(text, "old-trn2.json");
  EXPECT_EQ(old.collective.chips_per_instance, 1u);
  EXPECT_EQ(old.collective.chip_link_bytes_per_ns, 0);
  EXPECT_EQ(old.collective.link_bytes_per_ns, trn2.collective.link_bytes_per_ns);
}

}  // namespace sightline::device
