// The safetensors reader and writer (include/sightline/safetensors.h). The checks follow the reference
// implementation (huggingface/safetensors, safetensors/src/tensor.rs: header cap, byte counts, a data
// section indexed entirely, without holes or overlaps), each failure naming the file, the tensor and the
// numbers.
#include "sightline/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sightline/error.h"

namespace sightline::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add swaps for BE");

// Every dtype the format defines, with its element size: a file may hold tensors sightline has no type
// for (an int64 position_ids buffer in an ESM checkpoint), which open() accepts and load() refuses.
struct DTypeName {
  std::string_view name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {{"BOOL", 1}, {"U8", 1},   {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                 {"I16", 2},  {"U16", 2},  {"F16", 2},  {"BF16", 2},    {"I32", 4},
                                 {"U32", 4},  {"F32", 4},  {"F64", 8},  {"I64", 8},     {"U64", 8}};

size_t element_size(std::string_view name) {
  for (const DTypeName& d : kDTypes) {
    if (d.name == name) return d.size;
  }
  return 0;
}

std::string shape_text(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Parses and checks a header; `data_bytes` is what the file holds after it.
void parse_header(const std::string& path, std::string_view text, uint64_t data_bytes,
                  std::vector<TensorInfo>& tensors, std::vector<std::pair<std::string, std::string>>& metadata) {
  using nlohmann::json;
  SIGHTLINE_CHECK(!text.empty() && text.front() == '{', "safetensors {}: the header does not start with '{{'", path);
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail("safetensors {}: the header is not valid JSON: {}", path, e.what());
  }
  SIGHTLINE_CHECK(header.is_object(), "safetensors {}: the header is not a JSON object", path);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      SIGHTLINE_CHECK(entry.is_object(), "safetensors {}: __metadata__ is not an object of strings", path);
      for (const auto& [key, value] : entry.items()) {
        SIGHTLINE_CHECK(value.is_string(), "safetensors {}: __metadata__[\"{}\"] is not a string", path, key);
        metadata.emplace_back(key, value.get<std::string>());
      }
      continue;
    }
    SIGHTLINE_CHECK(entry.is_object(), "safetensors {}: tensor \"{}\" is not an object with dtype, shape and data_offsets",
                    path, name);
    TensorInfo t;
    t.name = name;
    const auto dtype = entry.find("dtype");
    SIGHTLINE_CHECK(dtype != entry.end() && dtype->is_string(), "safetensors {}: tensor \"{}\" has no dtype string",
                    path, name);
    t.dtype = dtype->get<std::string>();
    const size_t esize = element_size(t.dtype);
    SIGHTLINE_CHECK(esize != 0, "safetensors {}: tensor \"{}\" has unknown dtype \"{}\"", path, name, t.dtype);
    const auto shape = entry.find("shape");
    SIGHTLINE_CHECK(shape != entry.end() && shape->is_array(), "safetensors {}: tensor \"{}\" has no shape array",
                    path, name);
    uint64_t bytes = esize;
    bool overflow = false;
    for (const json& d : *shape) {
      SIGHTLINE_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                      "safetensors {}: tensor \"{}\" has a shape entry that is not a non-negative integer: {}", path,
                      name, d.dump());
      const uint64_t n = d.get<uint64_t>();
      SIGHTLINE_CHECK(n <= static_cast<uint64_t>(INT64_MAX), "safetensors {}: tensor \"{}\": dimension {} is too large",
                      path, name, n);
      t.shape.push_back(static_cast<int64_t>(n));
      overflow = overflow || __builtin_mul_overflow(bytes, n, &bytes);
    }
    const auto offsets = entry.find("data_offsets");
    SIGHTLINE_CHECK(offsets != entry.end() && offsets->is_array() && offsets->size() == 2 &&
                        (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
                    "safetensors {}: tensor \"{}\" has no data_offsets [begin, end] of two non-negative integers", path,
                    name);
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    SIGHTLINE_CHECK(t.begin <= t.end, "safetensors {}: tensor \"{}\" has data_offsets [{}, {}] that end before they begin",
                    path, name, t.begin, t.end);
    SIGHTLINE_CHECK(!overflow && t.end - t.begin == bytes,
                    "safetensors {}: tensor \"{}\" has data_offsets [{}, {}] ({} bytes), but {} {} needs {} bytes", path,
                    name, t.begin, t.end, t.end - t.begin, t.dtype, shape_text(t.shape),
                    overflow ? std::string("more than 2^64") : std::to_string(bytes));
    SIGHTLINE_CHECK(t.end <= data_bytes,
                    "safetensors {}: tensor \"{}\" has data_offsets [{}, {}], past the end of the data section ({} "
                    "bytes): the file is truncated or the offsets are wrong",
                    path, name, t.begin, t.end, data_bytes);
    tensors.push_back(std::move(t));
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The data section is indexed entirely: each tensor starts where the previous one ended.
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < covered && t.end > t.begin) {
      fail("safetensors {}: tensors \"{}\" [{}, {}) and \"{}\" [{}, {}) overlap", path, previous->name,
           previous->begin, previous->end, t.name, t.begin, t.end);
    }
    SIGHTLINE_CHECK(t.begin <= covered, "safetensors {}: bytes [{}, {}) of the data section belong to no tensor (before \"{}\")",
                    path, covered, t.begin, t.name);
    if (t.end > covered) {
      covered = t.end;
      previous = &t;
    }
  }
  SIGHTLINE_CHECK(covered == data_bytes,
                  "safetensors {}: the data section has {} bytes after the last tensor (it ends at {}, the file at {})",
                  path, data_bytes - covered, covered, data_bytes);
}

}  // namespace

bool dtype_from_name(std::string_view name, DType& out) {
  if (name == "F32") out = DType::f32;
  else if (name == "BF16") out = DType::bf16;
  else if (name == "F16") out = DType::f16;
  else if (name == "I32") out = DType::i32;
  else if (name == "BOOL") out = DType::boolean;
  else return false;
  return true;
}

std::string_view dtype_to_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

File File::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  SIGHTLINE_CHECK(in, "safetensors {}: cannot open the file", path);
  const auto size = static_cast<uint64_t>(in.tellg());
  SIGHTLINE_CHECK(size >= 8, "safetensors {}: truncated: {} bytes, a file starts with an 8-byte header length", path,
                  size);
  in.seekg(0);
  std::byte length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  const uint64_t header_bytes = read_le64(length_bytes);
  SIGHTLINE_CHECK(header_bytes <= kMaxHeaderBytes, "safetensors {}: a header of {} bytes exceeds the cap of {} bytes",
                  path, header_bytes, kMaxHeaderBytes);
  SIGHTLINE_CHECK(header_bytes <= size - 8,
                  "safetensors {}: truncated: the header is {} bytes long but the file has {} after its length", path,
                  header_bytes, size - 8);
  std::string text(header_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_bytes));
  SIGHTLINE_CHECK(in, "safetensors {}: cannot read the header", path);
  File f;
  f.path_ = path;
  f.data_start_ = 8 + header_bytes;
  parse_header(path, text, size - f.data_start_, f.tensors_, f.metadata_);
  return f;
}

File File::parse(std::span<const std::byte> bytes, std::string name) {
  SIGHTLINE_CHECK(bytes.size() >= 8, "safetensors {}: truncated: {} bytes, a file starts with an 8-byte header length",
                  name, bytes.size());
  const uint64_t header_bytes = read_le64(bytes.data());
  SIGHTLINE_CHECK(header_bytes <= kMaxHeaderBytes, "safetensors {}: a header of {} bytes exceeds the cap of {} bytes",
                  name, header_bytes, kMaxHeaderBytes);
  SIGHTLINE_CHECK(header_bytes <= bytes.size() - 8,
                  "safetensors {}: truncated: the header is {} bytes long but the file has {} after its length", name,
                  header_bytes, bytes.size() - 8);
  File f;
  f.path_ = std::move(name);
  f.data_start_ = 8 + header_bytes;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_bytes);
  parse_header(f.path_, text, bytes.size() - f.data_start_, f.tensors_, f.metadata_);
  f.bytes_.assign(bytes.begin(), bytes.end());
  f.in_memory_ = true;
  return f;
}

const TensorInfo* File::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const TensorInfo& File::require(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  // Name a few of the tensors it does hold, those sharing the longest suffix with the name first, so that
  // a prefix mismatch ("esm." or "model.") is obvious.
  std::vector<std::pair<size_t, const TensorInfo*>> near;
  for (const TensorInfo& t : tensors_) {
    size_t common = 0;
    while (common < t.name.size() && common < name.size() &&
           t.name[t.name.size() - 1 - common] == name[name.size() - 1 - common]) {
      ++common;
    }
    near.emplace_back(common, &t);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string names;
  for (size_t i = 0; i < near.size() && i < 3; ++i) names += fmt::format("{}\"{}\"", i ? ", " : "", near[i].second->name);
  fail("safetensors {}: no tensor named \"{}\" ({} tensors; the nearest names: {})", path_, name, tensors_.size(),
       names.empty() ? std::string("none") : names);
}

Tensor File::load(std::string_view name) const {
  const TensorInfo& t = require(name);
  DType dtype{};
  SIGHTLINE_CHECK(dtype_from_name(t.dtype, dtype),
                  "safetensors {}: tensor \"{}\" is {}; sightline reads F32, F16, BF16, I32 and BOOL tensors", path_,
                  t.name, t.dtype);
  SIGHTLINE_CHECK(t.shape.size() <= static_cast<size_t>(kMaxDims), "safetensors {}: tensor \"{}\" has {} dims; at most {} are supported",
                  path_, t.name, t.shape.size(), kMaxDims);
  const Dims shape{std::span<const int64_t>(t.shape)};
  const size_t nbytes = t.nbytes();
  void* data = std::malloc(std::max<size_t>(nbytes, 1));
  SIGHTLINE_CHECK(data != nullptr, "safetensors {}: out of host memory reading tensor \"{}\" ({} bytes)", path_, t.name,
                  nbytes);
  auto storage = std::make_shared<Storage>(Device::cpu(), nbytes, data, [](Storage& s) { std::free(s.data()); }, nullptr);
  if (in_memory_) {
    std::memcpy(data, bytes_.data() + data_start_ + t.begin, nbytes);
  } else {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
    in.read(static_cast<char*>(data), static_cast<std::streamsize>(nbytes));
    SIGHTLINE_CHECK(in && static_cast<size_t>(in.gcount()) == nbytes,
                    "safetensors {}: truncated: could not read the {} bytes of tensor \"{}\" at offset {} (did the file "
                    "change since it was opened?)",
                    path_, nbytes, t.name, data_start_ + t.begin);
  }
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Tensor File::load(std::string_view name, const Dims& shape) const {
  const TensorInfo& t = require(name);
  const bool same = static_cast<int>(t.shape.size()) == shape.size() &&
                    std::equal(t.shape.begin(), t.shape.end(), shape.begin());
  SIGHTLINE_CHECK(same, "safetensors {}: tensor \"{}\" has shape {}, expected {} (a checkpoint of another model size?)",
                  path_, t.name, shape_text(t.shape), shape.to_string());
  return load(name);
}

Tensor File::load(std::string_view name, const Dims& shape, DType dtype) const {
  const TensorInfo& t = require(name);
  SIGHTLINE_CHECK(t.dtype == dtype_to_name(dtype), "safetensors {}: tensor \"{}\" is {}, expected {}", path_, t.name,
                  t.dtype, dtype_to_name(dtype));
  return load(name, shape);
}

std::vector<std::byte> serialize(std::span<const NamedTensor> tensors,
                                 std::span<const std::pair<std::string, std::string>> metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    SIGHTLINE_CHECK(name != "__metadata__", "safetensors: a tensor may not be named __metadata__");
    SIGHTLINE_CHECK(!header.contains(name), "safetensors: two tensors are named \"{}\"", name);
    SIGHTLINE_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(),
                    "safetensors: tensor \"{}\" ({}) must be a contiguous cpu tensor; call .contiguous().to(Device::cpu()) "
                    "first",
                    name, t.defined() ? t.describe() : std::string("undefined"));
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_to_name(t.dtype());
    entry["shape"] = std::vector<int64_t>(t.shape().begin(), t.shape().end());
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = std::move(entry);
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + text.size() + offset);
  const uint64_t length = text.size();
  std::memcpy(out.data(), &length, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* data = out.data() + 8 + text.size();
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() > 0) std::memcpy(data, t.raw_data(), t.nbytes());
    data += t.nbytes();
  }
  return out;
}

void save(const std::string& path, std::span<const NamedTensor> tensors,
          std::span<const std::pair<std::string, std::string>> metadata) {
  const std::vector<std::byte> bytes = serialize(tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SIGHTLINE_CHECK(out, "safetensors {}: cannot create the file", path);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  SIGHTLINE_CHECK(out, "safetensors {}: writing {} bytes failed (disk full?)", path, bytes.size());
}

void save(const std::string& path, std::initializer_list<NamedTensor> tensors) {
  save(path, std::span<const NamedTensor>(tensors.begin(), tensors.size()));
}

}  // namespace sightline::safetensors
