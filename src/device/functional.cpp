#include "device/functional.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "device/validate.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

// float -> int32 the way a cast instruction would: round to nearest, saturate, NaN -> 0.
int32_t float_to_i32(float f) {
  if (std::isnan(f)) return 0;
  const float r = std::nearbyint(f);
  if (r >= 2147483647.0f) return std::numeric_limits<int32_t>::max();
  if (r <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(r);
}

void decode_run(const uint8_t* src, int64_t stride, int64_t n, DType t, float* out) {
  switch (t) {
    case DType::f32:
      if (stride == 4) {
        std::memcpy(out, src, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) std::memcpy(&out[i], src + i * stride, 4);
      }
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + i * stride, 2);
        out[i] = bf16_bits_to_float(b);
      }
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + i * stride, 2);
        out[i] = f16_bits_to_float(b);
      }
      return;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, src + i * stride, 4);
        out[i] = static_cast<float>(v);
      }
      return;
  }
}

void encode_run(const float* in, int64_t n, DType t, uint8_t* dst, int64_t stride) {
  switch (t) {
    case DType::f32:
      if (stride == 4) {
        std::memcpy(dst, in, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride, &in[i], 4);
      }
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_bf16_bits(in[i]);
        std::memcpy(dst + i * stride, &b, 2);
      }
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_f16_bits(in[i]);
        std::memcpy(dst + i * stride, &b, 2);
      }
      return;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = float_to_i32(in[i]);
        std::memcpy(dst + i * stride, &v, 4);
      }
      return;
  }
}

// Calls fn(byte offset of the run from the row start, first element index) for every innermost run.
template <typename Fn>
void for_each_run(const FunctionalExecutor::View& v, Fn&& fn) {
  int64_t index = 0;
  for (int64_t i0 = 0; i0 < v.sizes[0]; ++i0) {
    for (int64_t i1 = 0; i1 < v.sizes[1]; ++i1) {
      for (int64_t i2 = 0; i2 < v.sizes[2]; ++i2) {
        fn(i0 * v.strides[0] + i1 * v.strides[1] + i2 * v.strides[2], index);
        index += v.sizes[3];
      }
    }
  }
}

template <typename Op>
void map_binary(const float* a, const float* b, float* out, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}

template <typename Op>
void map_scalar(const float* a, float s, float* out, size_t n, bool reverse, Op op) {
  if (reverse) {
    for (size_t i = 0; i < n; ++i) out[i] = op(s, a[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = op(a[i], s);
  }
}

// Dispatches an ALU op to a lambda once, outside the element loop.
template <typename Body>
void with_alu(AluOp op, Body&& body) {
  switch (op) {
    case AluOp::add:
      return body([](float x, float y) { return x + y; });
    case AluOp::subtract:
      return body([](float x, float y) { return x - y; });
    case AluOp::multiply:
      return body([](float x, float y) { return x * y; });
    case AluOp::divide:
      return body([](float x, float y) { return x / y; });
    case AluOp::max:
      return body([](float x, float y) { return std::max(x, y); });
    case AluOp::min:
      return body([](float x, float y) { return std::min(x, y); });
    case AluOp::pow:
      return body([](float x, float y) { return std::pow(x, y); });
    case AluOp::bypass:
      return body([](float x, float) { return x; });
  }
}

float reduce_identity(AluOp op) {
  switch (op) {
    case AluOp::max:
      return -std::numeric_limits<float>::infinity();
    case AluOp::min:
      return std::numeric_limits<float>::infinity();
    case AluOp::multiply:
      return 1.0f;
    default:
      return 0.0f;
  }
}

template <typename F>
void map_unary(const float* in, float scale, float bias, float* out, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(in[i] * scale + bias);
}

void apply_activation(ActFunc func, const float* in, float scale, float bias, float* out, size_t n) {
  switch (func) {
    case ActFunc::identity:
      return map_unary(in, scale, bias, out, n, [](float x) { return x; });
    case ActFunc::exp:
      return map_unary(in, scale, bias, out, n, [](float x) { return std::exp(x); });
    case ActFunc::log:
      return map_unary(in, scale, bias, out, n, [](float x) { return std::log(x); });
    case ActFunc::sqrt:
      return map_unary(in, scale, bias, out, n, [](float x) { return std::sqrt(x); });
    case ActFunc::rsqrt:
      return map_unary(in, scale, bias, out, n, [](float x) { return 1.0f / std::sqrt(x); });
    case ActFunc::reciprocal:
      return map_unary(in, scale, bias, out, n, [](float x) { return 1.0f / x; });
    case ActFunc::tanh:
      return map_unary(in, scale, bias, out, n, [](float x) { return std::tanh(x); });
    case ActFunc::sigmoid:
      return map_unary(in, scale, bias, out, n, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    case ActFunc::relu:
      return map_unary(in, scale, bias, out, n, [](float x) { return x > 0 ? x : 0.0f; });
    case ActFunc::silu:
      return map_unary(in, scale, bias, out, n, [](float x) { return x / (1.0f + std::exp(-x)); });
    case ActFunc::gelu_tanh:
      return map_unary(in, scale, bias, out, n, [](float x) {
        const float k = std::sqrt(2.0f / 3.14159265358979f);
        return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
      });
    case ActFunc::square:
      return map_unary(in, scale, bias, out, n, [](float x) { return x * x; });
    case ActFunc::abs:
      return map_unary(in, scale, bias, out, n, [](float x) { return std::fabs(x); });
    case ActFunc::neg:
      return map_unary(in, scale, bias, out, n, [](float x) { return -x; });
  }
}

}  // namespace

FunctionalExecutor::FunctionalExecutor(const Executable& exe, OnChipMemory& sbuf, OnChipMemory& psum,
                                       std::vector<HbmMemory::Span> io)
    : exe_(exe), sbuf_(sbuf), psum_(psum), io_(std::move(io)) {}

FunctionalExecutor::View FunctionalExecutor::view(const AccessPattern& ap, const char* name) const {
  View v;
  v.name = name;
  v.dtype = ap.dtype;
  v.partitions = ap.partition_count;
  v.elements = static_cast<uint32_t>(ap.free_elements());
  v.offset = ap.offset;
  const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
  const int pad = 4 - ap.dim_count;
  for (int d = 0; d < ap.dim_count; ++d) {
    v.sizes[pad + d] = ap.dims[d].size;
    v.strides[pad + d] = int64_t{ap.dims[d].stride} * es;
  }
  if (ap.dim_count == 0) v.strides[3] = es;
  v.extent_end = operand_extent(ap, false).max;
  if (ap.memory == Memory::hbm) {
    v.tensor = ap.tensor;
    v.data = io_[ap.tensor].data + ap.offset;
    v.written = io_[ap.tensor].written + ap.offset;
    v.partition_stride = ap.partition_stride * es;
    return v;
  }
  OnChipMemory& chip = ap.memory == Memory::sbuf ? sbuf_ : psum_;
  v.chip = &chip;
  v.first_partition = ap.partition_start;
  v.data = chip.data(ap.partition_start) + ap.offset;
  v.written = chip.written(ap.partition_start) + ap.offset;
  v.partition_stride = chip.bytes_per_partition();
  return v;
}

void FunctionalExecutor::unwritten(const View& v, uint32_t p, int64_t byte) const {
  if (v.chip == nullptr) {
    fail("operand {} reads HBM tensor '{}' byte {} (partition row {}), which was never written", v.name,
         exe_.io[v.tensor].name, static_cast<int64_t>(v.offset) + p * v.partition_stride + byte, p);
  }
  fail("operand {} reads {} partition {} byte {}, which no instruction of this execution wrote", v.name,
       v.chip == &sbuf_ ? "SBUF" : "PSUM", v.first_partition + p, static_cast<int64_t>(v.offset) + byte);
}

void FunctionalExecutor::load(const View& v, uint32_t p, float* out) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    const uint8_t* w = v.written + row + off;
    if (stride == es) {
      const void* hole = std::memchr(w, 0, static_cast<size_t>(n * es));
      if (hole) unwritten(v, p, off + (static_cast<const uint8_t*>(hole) - w));
    } else {
      for (int64_t i = 0; i < n; ++i) {
        if (std::memchr(w + i * stride, 0, static_cast<size_t>(es))) unwritten(v, p, off + i * stride);
      }
    }
    decode_run(v.data + row + off, stride, n, v.dtype, out + index);
  });
}

void FunctionalExecutor::store(const View& v, uint32_t p, const float* in) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    encode_run(in + index, n, v.dtype, v.data + row + off, stride);
    uint8_t* w = v.written + row + off;
    if (stride == es) {
      std::memset(w, 1, static_cast<size_t>(n * es));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memset(w + i * stride, 1, static_cast<size_t>(es));
    }
  });
  if (v.chip) v.chip->note_written_end(v.first_partition + p, v.offset + static_cast<uint64_t>(v.extent_end));
}

void FunctionalExecutor::load_bytes(const View& v, uint32_t p, uint8_t* out) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    const uint8_t* src = v.data + row + off;
    const uint8_t* w = v.written + row + off;
    uint8_t* dst = out + index * es;
    if (stride == es) {
      const void* hole = std::memchr(w, 0, static_cast<size_t>(n * es));
      if (hole) unwritten(v, p, off + (static_cast<const uint8_t*>(hole) - w));
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (std::memchr(w + i * stride, 0, static_cast<size_t>(es))) unwritten(v, p, off + i * stride);
      std::memcpy(dst + i * es, src + i * stride, static_cast<size_t>(es));
    }
  });
}

void FunctionalExecutor::store_bytes(const View& v, uint32_t p, const uint8_t* in) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    uint8_t* dst = v.data + row + off;
    uint8_t* w = v.written + row + off;
    const uint8_t* src = in + index * es;
    if (stride == es) {
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      std::memset(w, 1, static_cast<size_t>(n * es));
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * stride, src + i * es, static_cast<size_t>(es));
      std::memset(w + i * stride, 1, static_cast<size_t>(es));
    }
  });
  if (v.chip) v.chip->note_written_end(v.first_partition + p, v.offset + static_cast<uint64_t>(v.extent_end));
}

void FunctionalExecutor::execute(const Instruction& in) {
  switch (in.opcode) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::tensor_copy:
      return elementwise(in);
    case Opcode::tensor_reduce:
      return reduce(in);
    case Opcode::bn_stats:
      return stats(in);
    case Opcode::activate:
      return activation(in);
    case Opcode::iota:
      return iota_fill(in);
    case Opcode::partition_all_reduce:
      return all_reduce(in);
    case Opcode::matmul:
      return matmul_run(in);
    case Opcode::dma_copy:
      return dma(in);
    case Opcode::dma_gather:
      return gather(in);
  }
}

void FunctionalExecutor::elementwise(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const bool has_b = in.src1.present();
  const View b = has_b ? view(in.src1, "src1") : View{};
  const size_t n = a.elements;
  a_.resize(n);
  b_.resize(n);
  c_.resize(n);
  for (uint32_t p = 0; p < dst.partitions; ++p) {
    load(a, p, a_.data());
    if (in.opcode == Opcode::tensor_copy) {
      store(dst, p, a_.data());
      continue;
    }
    if (in.opcode == Opcode::tensor_tensor) {
      load(b, p, b_.data());
      with_alu(in.alu(), [&](auto op) { map_binary(a_.data(), b_.data(), c_.data(), n, op); });
    } else {
      float s = in.imm0;
      if (has_b) load(b, p, &s);
      const bool reverse = (in.flags & kFlagReverse) != 0;
      with_alu(in.alu(), [&](auto op) { map_scalar(a_.data(), s, c_.data(), n, reverse, op); });
    }
    store(dst, p, c_.data());
  }
}

void FunctionalExecutor::reduce(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  a_.resize(a.elements);
  for (uint32_t p = 0; p < a.partitions; ++p) {
    load(a, p, a_.data());
    float acc = reduce_identity(in.alu());
    with_alu(in.alu(), [&](auto op) {
      for (float x : a_) acc = op(acc, x);
    });
    store(dst, p, &acc);
  }
}

void FunctionalExecutor::stats(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  a_.resize(a.elements);
  for (uint32_t p = 0; p < a.partitions; ++p) {
    load(a, p, a_.data());
    double sum = 0;
    for (float x : a_) sum += x;
    const double mean = sum / static_cast<double>(a_.size());
    double squares = 0;
    for (float x : a_) squares += (x - mean) * (x - mean);
    const float out[2] = {static_cast<float>(mean),
                          static_cast<float>(squares / static_cast<double>(a_.size()))};
    store(dst, p, out);
  }
}

void FunctionalExecutor::activation(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const View scale = in.src1.present() ? view(in.src1, "src1") : View{};
  const View acc = in.aux.present() ? view(in.aux, "aux") : View{};
  const size_t n = a.elements;
  a_.resize(n);
  c_.resize(n);
  for (uint32_t p = 0; p < a.partitions; ++p) {
    load(a, p, a_.data());
    float s = in.imm0;
    if (in.src1.present()) load(scale, p, &s);
    apply_activation(in.act(), a_.data(), s, in.imm1, c_.data(), n);
    store(dst, p, c_.data());
    if (in.aux.present()) {
      float sum = 0;
      for (float x : c_) sum += x;
      store(acc, p, &sum);
    }
  }
}

void FunctionalExecutor::iota_fill(const Instruction& in) {
  const View dst = view(in.dst, "dst");
  c_.resize(dst.elements);
  for (uint32_t p = 0; p < dst.partitions; ++p) {
    const float start = in.imm0 + in.imm1 * static_cast<float>(p);
    for (size_t i = 0; i < c_.size(); ++i) c_[i] = start + static_cast<float>(i);
    store(dst, p, c_.data());
  }
}

void FunctionalExecutor::all_reduce(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const size_t n = a.elements;
  a_.resize(n);
  c_.assign(n, reduce_identity(in.alu()));
  for (uint32_t p = 0; p < a.partitions; ++p) {
    load(a, p, a_.data());
    with_alu(in.alu(), [&](auto op) { map_binary(c_.data(), a_.data(), c_.data(), n, op); });
  }
  for (uint32_t p = 0; p < dst.partitions; ++p) store(dst, p, c_.data());
}

void FunctionalExecutor::matmul_run(const Instruction& in) {
  const View dst = view(in.dst, "dst"), st = view(in.src0, "stationary"), mv = view(in.src1, "moving");
  const size_t k = st.partitions, m = st.elements, n = mv.elements;
  a_.resize(k * m);
  b_.resize(k * n);
  c_.assign(m * n, 0.0f);
  for (uint32_t p = 0; p < k; ++p) {
    load(st, p, a_.data() + p * m);
    load(mv, p, b_.data() + p * n);
  }
  if (in.flags & kFlagAccumulate) {
    for (uint32_t row = 0; row < m; ++row) load(dst, row, c_.data() + row * n);
  }
  // out[i, j] += sum_p stationary[p, i] * moving[p, j]; j innermost so the loop vectorizes.
  for (size_t p = 0; p < k; ++p) {
    const float* moving_row = b_.data() + p * n;
    for (size_t i = 0; i < m; ++i) {
      const float w = a_[p * m + i];
      float* out = c_.data() + i * n;
      for (size_t j = 0; j < n; ++j) out[j] += w * moving_row[j];
    }
  }
  for (uint32_t row = 0; row < m; ++row) store(dst, row, c_.data() + row * n);
}

void FunctionalExecutor::dma(const Instruction& in) {
  const View dst = view(in.dst, "dst"), src = view(in.src0, "src0");
  if (in.dst.dtype == in.src0.dtype) {
    bytes_.resize(static_cast<size_t>(src.elements) * dtype_size(src.dtype));
    for (uint32_t p = 0; p < src.partitions; ++p) {
      load_bytes(src, p, bytes_.data());
      store_bytes(dst, p, bytes_.data());
    }
    return;
  }
  a_.resize(src.elements);
  for (uint32_t p = 0; p < src.partitions; ++p) {
    load(src, p, a_.data());
    store(dst, p, a_.data());
  }
}

void FunctionalExecutor::gather(const Instruction& in) {
  const View dst = view(in.dst, "dst"), table = view(in.src0, "src0"), ids = view(in.src1, "src1");
  const bool same_dtype = in.dst.dtype == in.src0.dtype;
  bytes_.resize(static_cast<size_t>(table.elements) * dtype_size(table.dtype));
  a_.resize(table.elements);
  for (uint32_t p = 0; p < dst.partitions; ++p) {
    float id = 0;
    load(ids, p, &id);
    if (!(id >= 0 && id < static_cast<float>(table.partitions))) {
      fail("operand src1 row {} holds index {}, outside the table's rows 0..{}", p, id, table.partitions - 1);
    }
    const uint32_t row = static_cast<uint32_t>(id);
    if (same_dtype) {
      load_bytes(table, row, bytes_.data());
      store_bytes(dst, p, bytes_.data());
    } else {
      load(table, row, a_.data());
      store(dst, p, a_.data());
    }
  }
}

}  // namespace sightline::device
