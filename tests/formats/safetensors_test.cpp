// safetensors (include/sightline/safetensors.h): round trips of checkpoints the tests write, loading onto
// the neuron device by name, and every refusal the reader promises (each message names what was wrong).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sightline/safetensors.h"
#include "sightline/sightline.h"

namespace sightline::safetensors {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("sightline_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// A file from a header text and a data section, as a hostile or broken writer would make it.
std::vector<std::byte> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0});
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_error(const std::vector<std::byte>& bytes) {
  try {
    File::parse(bytes, "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "parsed without an error";
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = t.to(Device::cpu()).to(DType::f32).contiguous();
  return {f.data<float>(), f.data<float>() + f.numel()};
}

TEST(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  Generator gen(3);
  const Tensor a = randn({4, 3}, {}, &gen);
  const Tensor b = randn({5}, DType::bf16, &gen);
  const Tensor c = randn({2, 2, 2}, DType::f16, &gen);
  const std::vector<int32_t> ids = {1, -2, 3};
  const Tensor d = from_vector(ids, {3});
  const Tensor e = zeros({0, 4});
  const std::vector<NamedTensor> tensors = {{"a.weight", a}, {"b", b}, {"c", c}, {"ids", d}, {"empty", e}};
  const std::vector<std::pair<std::string, std::string>> metadata = {{"format", "pt"}};
  const fs::path path = temp_file("round_trip.safetensors");
  save(path.string(), tensors, metadata);

  const File f = File::open(path.string());
  ASSERT_EQ(f.tensors().size(), 5u);
  ASSERT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.metadata()[0].first, "format");
  EXPECT_EQ(f.metadata()[0].second, "pt");
  for (const auto& [name, t] : tensors) {
    const Tensor back = f.load(name, t.shape(), t.dtype());
    EXPECT_EQ(back.dtype(), t.dtype()) << name;
    EXPECT_EQ(back.shape(), t.shape()) << name;
    ASSERT_EQ(back.nbytes(), t.nbytes()) << name;
    EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0) << name;
  }
  // The header is padded to a multiple of 8 bytes, as HF's writer does.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_bytes = 0;
  in.read(reinterpret_cast<char*>(&header_bytes), 8);
  EXPECT_EQ(header_bytes % 8, 0u);
  // The same bytes parsed from memory.
  const std::vector<std::byte> bytes = serialize(tensors, metadata);
  const File m = File::parse(bytes);
  EXPECT_EQ(values(m.load("a.weight")), values(a));
}

TEST(Safetensors, LoadsByNameOntoTheDevice) {
  Generator gen(5);
  const Tensor w = randn({8, 16}, {}, &gen);
  const fs::path path = temp_file("device.safetensors");
  save(path.string(), {{"encoder.layer.0.weight", w}});
  const Device neuron = Device::parse("neuron:0");
  const Tensor on_device = File::open(path.string()).load("encoder.layer.0.weight", {8, 16}).to(DType::bf16).to(neuron);
  EXPECT_EQ(on_device.device(), neuron);
  const std::vector<float> expected = values(w.to(DType::bf16));
  EXPECT_EQ(values(on_device), expected);
}

TEST(Safetensors, NamesAMissingTensorAndItsNearestNames) {
  const fs::path path = temp_file("names.safetensors");
  save(path.string(), {{"esm.encoder.layer.0.attention.self.query.weight", zeros({2, 2})}, {"other", zeros({1})}});
  const File f = File::open(path.string());
  try {
    f.load("encoder.layer.0.attention.self.query.weight");
    FAIL() << "a missing tensor loaded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no tensor named \"encoder.layer.0.attention.self.query.weight\""));
    EXPECT_THAT(e.what(), HasSubstr("\"esm.encoder.layer.0.attention.self.query.weight\""));
  }
  EXPECT_EQ(f.find("other")->shape, std::vector<int64_t>{1});
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, RefusesAWrongShapeOrDtype) {
  const fs::path path = temp_file("shape.safetensors");
  save(path.string(), {{"w", zeros({320, 1280})}});
  const File f = File::open(path.string());
  EXPECT_THAT([&] { f.load("w", {480, 1920}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensor \"w\" has shape [320, 1280], expected [480, 1920]")));
  EXPECT_THAT([&] { f.load("w", {320, 1280}, DType::bf16); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensor \"w\" is F32, expected BF16")));
}

TEST(Safetensors, AcceptsDtypesItCannotLoadUntilOneIsLoaded) {
  // ESM checkpoints carry an int64 position_ids buffer: opening the file must not fail on it.
  const std::string header = R"({"position_ids":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  const File f = File::parse(raw_file(header, 20));
  EXPECT_EQ(f.load("w").numel(), 1);
  EXPECT_THAT([&] { f.load("position_ids"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensor \"position_ids\" is I64; sightline reads F32")));
}

TEST(Safetensors, RefusesATruncatedFile) {
  std::vector<std::byte> bytes = serialize(std::vector<NamedTensor>{{"w", zeros({4, 4})}});
  EXPECT_THAT(parse_error(std::vector<std::byte>(bytes.begin(), bytes.begin() + 5)), HasSubstr("truncated: 5 bytes"));
  EXPECT_THAT(parse_error(std::vector<std::byte>(bytes.begin(), bytes.begin() + 20)),
              HasSubstr("truncated: the header is"));
  EXPECT_THAT(parse_error(std::vector<std::byte>(bytes.begin(), bytes.end() - 1)),
              HasSubstr("past the end of the data section (63 bytes): the file is truncated"));
  // On disk too, and a file cut after open() is reported when its tensor is read.
  const fs::path path = temp_file("truncated.safetensors");
  save(path.string(), {{"w", zeros({4, 4})}});
  fs::resize_file(path, fs::file_size(path) - 4);
  EXPECT_THAT([&] { File::open(path.string()); }, ::testing::ThrowsMessage<Error>(HasSubstr("truncated")));
}

TEST(Safetensors, RefusesOverlapsHolesAndTrailingBytes) {
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_THAT(parse_error(raw_file(overlap, 12)), HasSubstr("tensors \"a\" [0, 8) and \"b\" [4, 12) overlap"));
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_THAT(parse_error(raw_file(hole, 12)), HasSubstr("bytes [4, 8) of the data section belong to no tensor"));
  const std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_THAT(parse_error(raw_file(one, 10)), HasSubstr("has 6 bytes after the last tensor"));
  const std::string out_of_range = R"({"a":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}})";
  EXPECT_THAT(parse_error(raw_file(out_of_range, 16)), HasSubstr("past the end of the data section (16 bytes)"));
}

TEST(Safetensors, RefusesMalformedHeaders) {
  std::vector<std::byte> huge(16, std::byte{0});
  const uint64_t n = kMaxHeaderBytes + 1;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_THAT(parse_error(huge), HasSubstr("a header of 100000001 bytes exceeds the cap of 100000000 bytes"));
  EXPECT_THAT(parse_error(raw_file("[1, 2]", 0)), HasSubstr("does not start with '{'"));
  EXPECT_THAT(parse_error(raw_file("{\"a\": ", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(raw_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("unknown dtype \"F33\""));
  EXPECT_THAT(parse_error(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", 4)),
              HasSubstr("data_offsets [0, 4] (4 bytes), but F32 [3] needs 12 bytes"));
  EXPECT_THAT(parse_error(raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(parse_error(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)),
              HasSubstr("end before they begin"));
  EXPECT_THAT(parse_error(raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", 4)),
              HasSubstr("needs more than 2^64 bytes"));
  EXPECT_THAT(parse_error(raw_file(R"({"__metadata__":{"format":1}})", 0)), HasSubstr("is not a string"));
  EXPECT_THAT([] { File::open("/nonexistent/model.safetensors"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot open the file")));
}

TEST(Safetensors, TheWriterRefusesWhatTheReaderCouldNotRead) {
  const Tensor t = zeros({2, 3});
  EXPECT_THAT([&] { serialize(std::vector<NamedTensor>{{"t", t.transpose(0, 1)}}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("must be a contiguous cpu tensor")));
  EXPECT_THAT([&] { serialize(std::vector<NamedTensor>{{"t", t}, {"t", t}}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("two tensors are named \"t\"")));
}

}  // namespace
}  // namespace sightline::safetensors
