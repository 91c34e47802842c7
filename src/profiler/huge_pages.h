// Asks the kernel to back a large, not yet touched buffer with transparent huge pages. A trace of
// a million events is hundreds of megabytes of fresh memory (records, events, the JSON buffer):
// with 4 KiB pages, faulting it in (one fault, one cgroup charge and one page-table lock per page)
// costs more than filling it. With THP set to "madvise" (Debian's default) only advised ranges get
// 2 MiB pages. Only the whole 2 MiB pages inside [data, data + bytes) are advised, so the call never
// touches memory outside the buffer; it is a hint, and failure changes nothing but speed.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace sightline::profiler::detail {

inline void advise_huge_pages(const void* data, std::size_t bytes) noexcept {
  constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
  if (data == nullptr || bytes < 2 * kHugePage) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  if (last <= first) return;
#ifdef MADV_HUGEPAGE
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
}

}  // namespace sightline::profiler::detail
