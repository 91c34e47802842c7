// A set of byte addresses kept as disjoint half-open intervals, for the functional model's hazard
// check (which HBM bytes a group of lane-by-lane instructions reads and writes).
//
//   IntervalSet s;
//   s.add(0, 16);
//   s.add(16, 32);          // touching intervals merge: one span [0, 32)
//   s.overlaps(31, 40);     // true
//   s.clear();              // keeps the storage for the next group
//
// The spans live in one sorted vector rather than a node-based map: a group's ranges are a tile's rows
// of a few tensors, which merge into a handful of spans, so a look-up is a binary search over a few
// entries and an add moves a few entries at most, with no allocation once the vector has grown (a map
// allocated a node per range, on the path every instruction of a functional run takes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace sightline::device {

class IntervalSet {
 public:
  struct Span {
    uintptr_t begin = 0, end = 0;
  };

  // Whether [begin, end) shares a byte with any span (an empty range shares none).
  bool overlaps(uintptr_t begin, uintptr_t end) const {
    if (begin >= end) return false;
    // The first span that ends after begin is the only one that can overlap, if it starts before end.
    const auto it = std::upper_bound(spans_.begin(), spans_.end(), begin,
                                     [](uintptr_t b, const Span& s) { return b < s.end; });
    return it != spans_.end() && it->begin < end;
  }

  // Adds [begin, end), merging it with every span it overlaps or touches.
  void add(uintptr_t begin, uintptr_t end) {
    if (begin >= end) return;
    // Spans [first, last) are those that end at or after begin and start at or before end: they touch
    // or overlap the new range and become one span with it.
    const auto first = std::lower_bound(spans_.begin(), spans_.end(), begin,
                                        [](const Span& s, uintptr_t b) { return s.end < b; });
    auto last = first;
    while (last != spans_.end() && last->begin <= end) ++last;
    if (first == last) {
      spans_.insert(first, Span{begin, end});
      return;
    }
    first->begin = std::min(first->begin, begin);
    first->end = std::max(std::prev(last)->end, end);
    spans_.erase(first + 1, last);
  }

  void clear() { spans_.clear(); }
  bool empty() const { return spans_.empty(); }
  // In ascending order, disjoint and not touching.
  const std::vector<Span>& spans() const { return spans_; }

 private:
  std::vector<Span> spans_;
};

}  // namespace sightline::device
