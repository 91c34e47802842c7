#include "device/collective.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "sightline/error.h"

namespace sightline::device {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
#define SIGHTLINE_X(kind, name) \
  case CollectiveKind::kind:    \
    return name;
    SIGHTLINE_COLLECTIVES(SIGHTLINE_X)
#undef SIGHTLINE_X
  }
  return "?";
}

namespace {

void check_split(CollectiveKind kind, int ranks, uint64_t bytes) {
  SIGHTLINE_CHECK(ranks >= 1, "collective {}: needs at least one rank, got {}", collective_name(kind), ranks);
  if (kind != CollectiveKind::all_reduce) {
    SIGHTLINE_CHECK(bytes % static_cast<uint64_t>(ranks) == 0,
                    "collective {}: {} bytes do not split into {} equal parts; give every rank a shard of the "
                    "same size",
                    collective_name(kind), bytes, ranks);
  }
}

// Chunk c of n elements over `ranks` chunks: [begin, end), balanced (sizes differ by at most one).
uint64_t chunk_begin(uint64_t n, int ranks, int c) { return n * static_cast<uint64_t>(c) / static_cast<uint64_t>(ranks); }

template <typename T>
T add(T a, T b);
template <>
float add(float a, float b) { return a + b; }
template <>
int32_t add(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));  // wraps, as the hardware does
}
template <>
bf16 add(bf16 a, bf16 b) { return bf16(static_cast<float>(a) + static_cast<float>(b)); }
template <>
f16 add(f16 a, f16 b) { return f16(static_cast<float>(a) + static_cast<float>(b)); }

// The reduce-scatter phase of the ring: chunk c starts at rank c + 1 and travels the ring, each rank
// adding its own part, and ends complete at rank c. Writes chunk c of the sum to `sums` (n elements).
template <typename T>
void ring_sum(std::span<const std::byte* const> inputs, T* sums, uint64_t n) {
  const int ranks = static_cast<int>(inputs.size());
  for (int c = 0; c < ranks; ++c) {
    const uint64_t begin = chunk_begin(n, ranks, c), end = chunk_begin(n, ranks, c + 1);
    const auto* first = reinterpret_cast<const T*>(inputs[static_cast<size_t>((c + 1) % ranks)]);
    std::copy(first + begin, first + end, sums + begin);
    for (int step = 2; step <= ranks; ++step) {
      const auto* part = reinterpret_cast<const T*>(inputs[static_cast<size_t>((c + step) % ranks)]);
      for (uint64_t e = begin; e < end; ++e) sums[e] = add(sums[e], part[e]);
    }
  }
}

template <typename T>
void reduce(CollectiveKind kind, std::span<const std::byte* const> inputs, std::span<std::byte* const> outputs,
            uint64_t bytes) {
  const int ranks = static_cast<int>(inputs.size());
  const uint64_t n = bytes / sizeof(T);
  std::vector<T> sums(n);
  ring_sum<T>(inputs, sums.data(), n);
  for (int r = 0; r < ranks; ++r) {
    std::byte* out = outputs[static_cast<size_t>(r)];
    if (kind == CollectiveKind::all_reduce) {
      std::memcpy(out, sums.data(), bytes);
    } else {  // reduce-scatter: rank r keeps chunk r
      const uint64_t per = n / static_cast<uint64_t>(ranks);
      std::memcpy(out, sums.data() + per * static_cast<uint64_t>(r), per * sizeof(T));
    }
  }
}

}  // namespace

uint64_t collective_input_bytes(CollectiveKind kind, int ranks, uint64_t bytes) {
  return kind == CollectiveKind::all_gather ? bytes / static_cast<uint64_t>(ranks) : bytes;
}

uint64_t collective_output_bytes(CollectiveKind kind, int ranks, uint64_t bytes) {
  return kind == CollectiveKind::reduce_scatter ? bytes / static_cast<uint64_t>(ranks) : bytes;
}

CollectiveTiming ring_collective_timing(const Spec& spec, CollectiveKind kind, std::span<const int> cores,
                                        uint64_t bytes) {
  CollectiveTiming t = ring_collective_timing(spec, kind, static_cast<int>(cores.size()), bytes);
  const int per_chip = static_cast<int>(std::max<uint32_t>(1, spec.cores_per_instance));
  const CollectiveSpec& cc = spec.collective;
  std::vector<int> chips;
  for (const int core : cores) {
    const int chip = core / per_chip;
    SIGHTLINE_CHECK(core >= 0 && chip < static_cast<int>(cc.chips_per_instance),
                    "collective {}: core {} is beyond the {} chip(s) of {} cores of device spec '{}' "
                    "(collective.chips_per_instance); use cores below {}",
                    collective_name(kind), core, cc.chips_per_instance, per_chip, spec.name,
                    static_cast<int>(cc.chips_per_instance) * per_chip);
    if (std::find(chips.begin(), chips.end(), chip) == chips.end()) chips.push_back(chip);
  }
  t.chips = static_cast<uint32_t>(std::max<size_t>(1, chips.size()));
  if (t.steps == 0 || chips.size() < 2) return t;
  SIGHTLINE_CHECK(cc.chip_link_bytes_per_ns > 0,
                  "collective {}: its cores span {} chips, but device spec '{}' has no chip-to-chip links "
                  "(collective.chip_link_bytes_per_ns, chips_per_instance); add them as specs/trn2.json has, or "
                  "keep the group on the {} cores of one chip",
                  collective_name(kind), chips.size(), spec.name, per_chip);
  const double chunk = static_cast<double>(t.chunk_bytes);
  const double within = cc.step_latency_ns + chunk / cc.link_bytes_per_ns;
  const double across = cc.chip_step_latency_ns + chunk / cc.chip_link_bytes_per_ns;
  bool any_within = false;  // a ring of one core per chip has no hop inside a chip
  for (size_t r = 0; r < cores.size(); ++r) {
    any_within = any_within || cores[r] / per_chip == cores[(r + 1) % cores.size()] / per_chip;
  }
  const double step = any_within ? std::max(within, across) : across;
  t.chip_hop_bounds = !any_within || across > within;
  t.duration_ns = static_cast<double>(t.steps) * step;
  return t;
}

CollectiveTiming ring_collective_timing(const Spec& spec, CollectiveKind kind, int ranks, uint64_t bytes) {
  check_split(kind, ranks, bytes);
  SIGHTLINE_CHECK(spec.collective.link_bytes_per_ns > 0,
                  "device spec '{}' has no collective section (collective.link_bytes_per_ns); it cannot run "
                  "collectives: add one as specs/trn2.json has",
                  spec.name);
  CollectiveTiming t;
  if (ranks == 1) return t;  // nothing moves
  const auto n = static_cast<uint64_t>(ranks);
  const uint32_t phase = static_cast<uint32_t>(ranks - 1);
  t.steps = kind == CollectiveKind::all_reduce ? 2 * phase : phase;
  t.chunk_bytes = (bytes + n - 1) / n;
  // Every link carries one chunk per step; nccl-tests' bus bytes are the same count in bytes.
  t.bus_bytes = kind == CollectiveKind::all_reduce ? 2 * (n - 1) * bytes / n : (n - 1) * bytes / n;
  t.duration_ns = static_cast<double>(t.steps) *
                  (spec.collective.step_latency_ns + static_cast<double>(t.chunk_bytes) / spec.collective.link_bytes_per_ns);
  return t;
}

void ring_collective_compute(CollectiveKind kind, DType dtype, std::span<const std::byte* const> inputs,
                             std::span<std::byte* const> outputs, uint64_t bytes) {
  const int ranks = static_cast<int>(inputs.size());
  SIGHTLINE_CHECK(outputs.size() == inputs.size(), "collective {}: {} inputs but {} outputs", collective_name(kind),
                  inputs.size(), outputs.size());
  check_split(kind, ranks, bytes);
  if (kind == CollectiveKind::all_gather) {
    const uint64_t per = bytes / static_cast<uint64_t>(ranks);
    for (int r = 0; r < ranks; ++r) {
      for (int from = 0; from < ranks; ++from) {
        std::memcpy(outputs[static_cast<size_t>(r)] + per * static_cast<uint64_t>(from),
                    inputs[static_cast<size_t>(from)], per);
      }
    }
    return;
  }
  SIGHTLINE_CHECK(bytes % dtype_size(dtype) == 0, "collective {}: {} bytes are not whole {} elements",
                  collective_name(kind), bytes, dtype_name(dtype));
  switch (dtype) {
    case DType::f32: reduce<float>(kind, inputs, outputs, bytes); return;
    case DType::bf16: reduce<bf16>(kind, inputs, outputs, bytes); return;
    case DType::f16: reduce<f16>(kind, inputs, outputs, bytes); return;
    case DType::i32: reduce<int32_t>(kind, inputs, outputs, bytes); return;
    default:
      fail("collective {}: cannot sum {} tensors; sums are f32, bf16, f16 or i32", collective_name(kind),
           dtype_name(dtype));
  }
}

}  // namespace sightline::device
