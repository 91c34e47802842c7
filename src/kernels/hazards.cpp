#include "sightline/kernels/hazards.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "device/validate.h"
#include "sightline/error.h"

namespace sightline::kernels {

using device::AccessPattern;
using device::Memory;

namespace {

// Comparisons of a byte offset with an access's first byte, for the sorted ByStart vectors.
constexpr auto starts_after = [](int64_t byte, const auto& access) { return byte < access.region.byte_begin; };
constexpr auto starts_before = [](const auto& access, int64_t byte) { return access.region.byte_begin < byte; };

}  // namespace

HazardTracker::HazardTracker(uint32_t stream_count)
    : stream_count_(stream_count),
      issued_(stream_count, 0),
      known_(stream_count, std::vector<uint32_t>(stream_count, 0)),
      history_(stream_count),
      needed_(stream_count, 0) {}

HazardTracker::Region HazardTracker::region_of(const AccessPattern& ap) {
  Region r;
  r.memory = ap.memory;
  if (ap.memory == Memory::hbm) {
    // HBM rows interleave inside one tensor: track the byte range the whole pattern spans.
    const device::ByteExtent e = device::operand_extent(ap, true);
    r.tensor = ap.tensor;
    r.partition_end = 1;
    r.byte_begin = static_cast<int64_t>(ap.offset) + e.min;
    r.byte_end = static_cast<int64_t>(ap.offset) + e.max;
    // Partitions a fixed pitch apart, each spanning less than the pitch: rows with gaps between them.
    const device::ByteExtent row = device::operand_extent(ap, false);
    const int64_t pitch = int64_t{ap.partition_stride} * static_cast<int64_t>(dtype_size(ap.dtype));
    if (ap.partition_count > 1 && row.min == 0 && pitch > row.max) {
      r.row_stride = pitch;
      r.row_bytes = row.max;
    }
    return r;
  }
  const device::ByteExtent e = device::operand_extent(ap, false);
  r.partition_begin = ap.partition_start;
  r.partition_end = uint32_t{ap.partition_start} + ap.partition_count;
  r.byte_begin = static_cast<int64_t>(ap.offset) + e.min;
  r.byte_end = static_cast<int64_t>(ap.offset) + e.max;
  return r;
}

int HazardTracker::length_class(const Region& r) {
  const int64_t length = r.byte_end - r.byte_begin;
  return length <= 0 ? 0 : static_cast<int>(std::bit_width(static_cast<uint64_t>(length)));
}

void HazardTracker::need(const Region& r, bool write, std::vector<uint32_t>& needed) const {
  const auto it = accesses_.find(bucket_key(r));
  if (it == accesses_.end()) return;
  // Reads after reads never conflict; everything else (RAW, WAR, WAW) orders the two.
  const auto visit = [&](const Side& side) {
    for (uint64_t classes = side.occupied; classes != 0; classes &= classes - 1) {
      const int k = std::countr_zero(classes);
      const ByStart& by_start = side.by_class[k];
      // Class k is shorter than 2^k bytes, so an overlapping access starts after byte_begin - 2^k.
      const int64_t reach = k >= 63 ? std::numeric_limits<int64_t>::max() : int64_t{1} << k;
      const int64_t from = r.byte_begin < std::numeric_limits<int64_t>::min() + reach
                               ? std::numeric_limits<int64_t>::min()
                               : r.byte_begin - reach;
      for (auto a = std::upper_bound(by_start.begin(), by_start.end(), from, starts_after);
           a != by_start.end() && a->region.byte_begin < r.byte_end; ++a) {
        if (!a->region.overlaps(r)) continue;
        needed[a->stream] = std::max(needed[a->stream], a->count);
      }
    }
  };
  visit(it->second.writes);
  if (write) visit(it->second.reads);
}

void HazardTracker::record(const Region& r, uint32_t stream, uint32_t count, bool write) {
  Bucket& bucket = accesses_[bucket_key(r)];
  const int k = length_class(r);
  if (write) {
    // Accesses inside a region this instruction overwrites are ordered before it (it waited for them
    // or follows them in its stream), so any later conflict with them is also a conflict with this
    // write, whose wait implies theirs. Dropping them keeps the lists short. A contained access is no
    // longer than r (class <= k) and starts in [byte_begin, byte_end].
    for (Side* side : {&bucket.reads, &bucket.writes}) {
      const uint64_t upto = k >= 63 ? ~uint64_t{0} : (uint64_t{2} << k) - 1;
      for (uint64_t classes = side->occupied & upto; classes != 0; classes &= classes - 1) {
        const int c = std::countr_zero(classes);
        ByStart& by_start = side->by_class[c];
        const auto lo = std::lower_bound(by_start.begin(), by_start.end(), r.byte_begin, starts_before);
        const auto hi = std::upper_bound(lo, by_start.end(), r.byte_end, starts_after);
        by_start.erase(std::remove_if(lo, hi, [&](const Access& a) { return r.contains(a.region); }), hi);
        if (by_start.empty()) side->occupied &= ~(uint64_t{1} << c);
      }
    }
  } else {
    ByStart& reads = bucket.reads.by_class[k];
    auto a = std::lower_bound(reads.begin(), reads.end(), r.byte_begin, starts_before);
    for (; a != reads.end() && a->region.byte_begin == r.byte_begin; ++a) {
      if (a->stream == stream && a->region == r) {
        a->count = count;  // a later read of the same bytes by the same stream supersedes
        return;
      }
    }
  }
  Side& side = write ? bucket.writes : bucket.reads;
  ByStart& by_start = side.by_class[k];
  by_start.insert(std::upper_bound(by_start.begin(), by_start.end(), r.byte_begin, starts_after),
                  Access{r, stream, count, write});
  side.occupied |= uint64_t{1} << k;
}

void HazardTracker::track(device::Instruction& in, uint32_t stream) {
  SIGHTLINE_ASSERT_MSG(stream < stream_count_, "stream {} of {}", stream, stream_count_);
  const bool accumulates = in.opcode == device::Opcode::matmul && (in.flags & device::kFlagAccumulate);
  struct Operand {
    const AccessPattern* ap;
    bool write;
  };
  const Operand operands[] = {{&in.src0, false}, {&in.src1, false}, {&in.dst, true}, {&in.aux, true}};
  std::vector<uint32_t>& needed = needed_;
  std::fill(needed.begin(), needed.end(), 0);
  for (const Operand& op : operands) {
    if (!op.ap->present()) continue;
    const Region r = region_of(*op.ap);
    need(r, op.write, needed);
    if (op.write && accumulates) need(r, false, needed);
  }
  std::vector<uint32_t>& known = known_[stream];
  for (uint32_t t = 0; t < stream_count_; ++t) {
    if (t == stream || needed[t] <= known[t]) needed[t] = 0;
  }
  // A wait is implied when another awaited instruction already knew it done when it issued.
  for (uint32_t t = 0; t < stream_count_; ++t) {
    if (needed[t] == 0) continue;
    for (uint32_t u = 0; u < stream_count_; ++u) {
      if (u != t && needed[u] != 0 && history(u, needed[u])[t] >= needed[t]) {
        needed[t] = 0;
        break;
      }
    }
  }
  for (uint32_t t = 0; t < stream_count_; ++t) {
    if (needed[t] == 0) continue;
    in.waits.push_back({static_cast<uint16_t>(t), needed[t]});
    known[t] = std::max(known[t], needed[t]);
    const uint32_t* learned = history(t, needed[t]);
    for (uint32_t u = 0; u < stream_count_; ++u) known[u] = std::max(known[u], learned[u]);
  }
  const uint32_t count = ++issued_[stream];
  known[stream] = count - 1;  // earlier instructions of the stream are done when this one issues
  history_[stream].insert(history_[stream].end(), known.begin(), known.end());
  in.updates.push_back({static_cast<uint16_t>(stream), 1});
  for (const Operand& op : operands) {
    if (!op.ap->present()) continue;
    const Region r = region_of(*op.ap);
    if (!op.write || accumulates) record(r, stream, count, false);
    if (op.write) record(r, stream, count, true);
  }
}

}  // namespace sightline::kernels
