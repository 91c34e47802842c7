#include "sightline/kernels/hazards.h"

#include <algorithm>

#include "device/validate.h"
#include "sightline/error.h"

namespace sightline::kernels {

using device::AccessPattern;
using device::Memory;

HazardTracker::HazardTracker(uint32_t stream_count)
    : stream_count_(stream_count),
      issued_(stream_count, 0),
      known_(stream_count, std::vector<uint32_t>(stream_count, 0)),
      history_(stream_count) {}

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
    return r;
  }
  const device::ByteExtent e = device::operand_extent(ap, false);
  r.partition_begin = ap.partition_start;
  r.partition_end = uint32_t{ap.partition_start} + ap.partition_count;
  r.byte_begin = static_cast<int64_t>(ap.offset) + e.min;
  r.byte_end = static_cast<int64_t>(ap.offset) + e.max;
  return r;
}

void HazardTracker::need(const Region& r, bool write, std::vector<uint32_t>& needed) const {
  const auto it = accesses_.find(bucket_key(r));
  if (it == accesses_.end()) return;
  for (const Access& a : it->second) {
    // Reads after reads never conflict; everything else (RAW, WAR, WAW) orders the two.
    if (!write && !a.write) continue;
    if (!a.region.overlaps(r)) continue;
    needed[a.stream] = std::max(needed[a.stream], a.count);
  }
}

void HazardTracker::record(const Region& r, uint32_t stream, uint32_t count, bool write) {
  std::vector<Access>& list = accesses_[bucket_key(r)];
  if (write) {
    // Accesses inside a region this instruction overwrites are ordered before it (it waited for them
    // or follows them in its stream), so any later conflict with them is also a conflict with this
    // write, whose wait implies theirs. Dropping them keeps the lists short.
    std::erase_if(list, [&](const Access& a) { return r.contains(a.region); });
  } else {
    for (Access& a : list) {
      if (!a.write && a.stream == stream && a.region == r) {
        a.count = count;  // a later read of the same bytes by the same stream supersedes
        return;
      }
    }
  }
  list.push_back({r, stream, count, write});
}

void HazardTracker::track(device::Instruction& in, uint32_t stream) {
  SIGHTLINE_ASSERT_MSG(stream < stream_count_, "stream {} of {}", stream, stream_count_);
  const bool accumulates = in.opcode == device::Opcode::matmul && (in.flags & device::kFlagAccumulate);
  struct Operand {
    const AccessPattern* ap;
    bool write;
  };
  const Operand operands[] = {{&in.src0, false}, {&in.src1, false}, {&in.dst, true}, {&in.aux, true}};
  std::vector<uint32_t> needed(stream_count_, 0);
  std::vector<Region> regions;
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
      if (u != t && needed[u] != 0 && history_[u][needed[u] - 1][t] >= needed[t]) {
        needed[t] = 0;
        break;
      }
    }
  }
  for (uint32_t t = 0; t < stream_count_; ++t) {
    if (needed[t] == 0) continue;
    in.waits.push_back({static_cast<uint16_t>(t), needed[t]});
    known[t] = std::max(known[t], needed[t]);
    const std::vector<uint32_t>& learned = history_[t][needed[t] - 1];
    for (uint32_t u = 0; u < stream_count_; ++u) known[u] = std::max(known[u], learned[u]);
  }
  const uint32_t count = ++issued_[stream];
  known[stream] = count - 1;  // earlier instructions of the stream are done when this one issues
  history_[stream].push_back(known);
  in.updates.push_back({static_cast<uint16_t>(stream), 1});
  for (const Operand& op : operands) {
    if (!op.ap->present()) continue;
    const Region r = region_of(*op.ap);
    if (!op.write || accumulates) record(r, stream, count, false);
    if (op.write) record(r, stream, count, true);
  }
}

}  // namespace sightline::kernels
