// Fuzz target for the safetensors reader (include/sightline/safetensors.h): any input must either parse or
// throw sightline::Error naming what is wrong; every tensor of a file that parses must load (or be refused
// for its dtype or rank) with exactly its byte count, and the loaded tensors written again must read back
// to the same names, shapes and bytes. Built with -fsanitize=fuzzer under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "sightline/error.h"
#include "sightline/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sightline;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  std::optional<safetensors::File> file;
  try {
    file = safetensors::File::parse(bytes, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  std::vector<safetensors::NamedTensor> loaded;
  for (const safetensors::TensorInfo& t : file->tensors()) {
    if (t.nbytes() > (size_t{1} << 24)) continue;  // the bytes are in the input, but keep each run small
    Tensor tensor;
    try {
      tensor = file->load(t.name);
    } catch (const Error&) {
      continue;  // a dtype without a sightline type, or more than kMaxDims dims
    }
    if (tensor.nbytes() != t.nbytes()) __builtin_trap();
    loaded.emplace_back(t.name, tensor);
  }
  try {
    const std::vector<std::byte> again = safetensors::serialize(loaded, file->metadata());
    const safetensors::File reread = safetensors::File::parse(again, "fuzz/again.safetensors");
    if (reread.tensors().size() != loaded.size() || reread.metadata() != file->metadata()) __builtin_trap();
    for (const auto& [name, tensor] : loaded) {
      const Tensor back = reread.load(name, tensor.shape(), tensor.dtype());
      if (back.nbytes() != tensor.nbytes() ||
          (tensor.nbytes() > 0 && std::memcmp(back.raw_data(), tensor.raw_data(), tensor.nbytes()) != 0)) {
        __builtin_trap();
      }
    }
  } catch (const Error&) {
    __builtin_trap();  // the writer refuses only what the reader would refuse
  }
  return 0;
}
