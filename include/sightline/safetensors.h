// safetensors: the checkpoint format HuggingFace ships (https://huggingface.co/docs/safetensors).
//
//   using namespace sightline;
//   const safetensors::File ckpt = safetensors::File::open("model.safetensors");
//   Tensor w = ckpt.load("encoder.layer.0.attention.self.query.weight", {320, 320})  // cpu, as stored
//                  .to(DType::bf16).to(Device::parse("neuron:0"));
//   safetensors::save("out.safetensors", {{"w", w.to(Device::cpu())}});
//
// A file is an 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype": "F32", "shape":
// [2, 3], "data_offsets": [begin, end]}, ..., optional "__metadata__": {string: string}}), then the raw
// little-endian tensor bytes, offsets relative to the end of the header. open() reads and checks the
// header only (tensors are read one at a time by load()), and refuses with sightline::Error, naming the
// file and what is wrong: a file shorter than its header or its offsets say (truncated), a header over
// kMaxHeaderBytes, malformed JSON, an unknown dtype, offsets whose byte count does not match dtype x
// shape, tensors that overlap, holes or trailing bytes in the data section. load() refuses a name the
// file does not hold, a shape other than the one asked for, and a dtype sightline has no type for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sightline/dtype.h"
#include "sightline/tensor.h"

namespace sightline::safetensors {

// The largest header accepted (the reference implementation's cap, 100 MB): a corrupt length must not
// make a reader allocate gigabytes.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor entry of the header.
struct TensorInfo {
  std::string name;
  std::string dtype;           // as the file names it: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // any rank; load() takes up to kMaxDims
  uint64_t begin = 0, end = 0;  // byte offsets in the data section, [begin, end)
  size_t nbytes() const { return static_cast<size_t>(end - begin); }
};

class File {
 public:
  // Reads and validates the header of a file on disk.
  static File open(const std::string& path);
  // Validates a whole file held in memory (the fuzz target and tests); `bytes` is copied.
  static File parse(std::span<const std::byte> bytes, std::string name = "<memory>");

  const std::string& path() const { return path_; }
  // Entries in the order of their data offsets.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The optional "__metadata__" object (HF writes {"format": "pt"}).
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;

  // The tensor as stored (its dtype, its shape), on cpu. Throws for a missing name or a dtype without a
  // sightline type (F32, F16, BF16, I32 and BOOL are read).
  Tensor load(std::string_view name) const;
  // The same, after checking the shape the caller expects (a model's parameter).
  Tensor load(std::string_view name, const Dims& shape) const;
  // The same, after checking the dtype too.
  Tensor load(std::string_view name, const Dims& shape, DType dtype) const;

 private:
  const TensorInfo& require(std::string_view name) const;
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<std::byte> bytes_;  // the whole file, when parsed from memory
  bool in_memory_ = false;
};

// The sightline dtype of a safetensors dtype name, or false when there is none.
bool dtype_from_name(std::string_view name, DType& out);
// The safetensors name of a sightline dtype ("F32", "BF16", "F16", "I32", "BOOL").
std::string_view dtype_to_name(DType dtype);

using NamedTensor = std::pair<std::string, Tensor>;
// The bytes of a safetensors file holding `tensors` (contiguous cpu tensors, written in this order) and
// `metadata`; the header is padded with spaces to a multiple of 8 bytes, as HF's writer does.
std::vector<std::byte> serialize(std::span<const NamedTensor> tensors,
                                 std::span<const std::pair<std::string, std::string>> metadata = {});
// Writes serialize(tensors, metadata) to `path`.
void save(const std::string& path, std::span<const NamedTensor> tensors,
          std::span<const std::pair<std::string, std::string>> metadata = {});
void save(const std::string& path, std::initializer_list<NamedTensor> tensors);

}  // namespace sightline::safetensors
