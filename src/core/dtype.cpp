#include "sightline/dtype.h"

#include "sightline/error.h"

namespace sightline {

DType dtype_parse(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16" || name == "half") return DType::f16;
  if (name == "i32" || name == "int32" || name == "int") return DType::i32;
  if (name == "bool") return DType::boolean;
  fail("unknown dtype '{}'; valid dtypes are f32, bf16, f16, i32, bool", name);
}

}  // namespace sightline
