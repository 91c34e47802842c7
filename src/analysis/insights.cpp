#include "analysis/insights.h"

#include <filesystem>

#include "analysis/collectives.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "analysis/summary.h"

namespace sightline::analysis {
namespace {

using device::Engine;

// Thresholds: the reference's targets where it has one (§1.4: average DMA >= 32 KiB, >= 2 KiB per
// partition), otherwise the point where the effect is larger than the noise of one execution.
constexpr double kSmallDmaBytes = 32768;
constexpr double kIdleShareWorthReporting = 0.10;
constexpr int kTinyExecutionsMin = 3;
constexpr double kImbalanceBusyShare = 0.6;
constexpr double kImbalanceOtherShare = 0.2;
constexpr double kLowTensorHfu = 0.5;
constexpr double kExcessHbmFactor = 1.5;

std::string us(double ns) { return fmt::format("{:.1f} us", ns / 1000.0); }

// Over the captured executions, the population of every metric beside it (not trace.json's
// nc_exec_running events, which may hold many more executions than were captured).
void idle_gaps(const ProfileDir& profile, std::vector<Insight>& out) {
  const bool merged = profile.ranks().size() > 1;
  for (const CoreActivity& c : core_activity(captured_executions(profile))) {
    if (c.executions < 2) continue;
    const double span = static_cast<double>(c.span_ns()), idle = static_cast<double>(c.idle_ns);
    if (span <= 0 || idle / span < kIdleShareWorthReporting) continue;
    const std::string core = merged ? fmt::format("rank {} NeuronCore {}", c.rank, c.core) : fmt::format("NeuronCore {}", c.core);
    out.push_back({"idle_gaps", fmt::format("{} idles {:.0f}% of the time between executions", core,
                                            100 * idle / span),
                   fmt::format("{} executions span {}; the device is idle for {} of it (largest gap {}) while the "
                               "host dispatches the next op", c.executions, us(span), us(idle),
                               us(static_cast<double>(c.largest_gap_ns))),
                   "fuse the ops (a built-in such as rms_norm) or compile(fn) so that one executable runs per step; "
                   "avoid host reads between device ops",
                   idle});
  }
}

void tiny_executions(const ProfileDir& profile, const Summary& total, std::vector<Insight>& out) {
  const double overhead = profile.manifest.device.runtime.submission_ns;
  if (total.executions < kTinyExecutionsMin || overhead <= 0) return;
  const double average = total.total_time_ns / double(total.executions);
  if (average >= overhead) return;
  out.push_back({"tiny_executions", fmt::format("{} executions of {} executables average {} each",
                                                total.executions, profile.executables.size(), us(average)),
                 fmt::format("each execution pays a {} submission overhead, more than the {} it computes",
                             us(overhead), us(average)),
                 "fuse the chain into one executable (built-in fused kernels or compile(fn))",
                 double(total.executions - 1) * overhead});
}

void small_dma(const ProfileDir& profile, const Summary& total, std::vector<Insight>& out) {
  if (total.dma_transfer_count == 0 || total.dma_average_bytes >= kSmallDmaBytes) return;
  const double fixed = profile.manifest.device.dma.fixed_cost_ns;
  const double ideal_count = std::ceil(double(total.dma_transfer_bytes) / kSmallDmaBytes);
  const double saving = std::max(0.0, double(total.dma_transfer_count) - ideal_count) * fixed /
                        std::max(1u, profile.manifest.device.dma.queues);
  out.push_back({"small_dma", fmt::format("DMA transfers average {:.0f} bytes (target >= {:.0f})",
                                          total.dma_average_bytes, kSmallDmaBytes),
                 fmt::format("{} transfers move {} bytes; each pays {} of fixed cost", total.dma_transfer_count,
                             total.dma_transfer_bytes, us(fixed)),
                 "move larger tiles per transfer (>= 2 KiB per partition; 4 KiB saturates a queue)", saving});
}

void engine_imbalance(const Summary& total, std::vector<Insight>& out) {
  if (total.total_time_ns <= 0) return;
  int busiest = -1;
  double busiest_share = 0, others = 0;
  for (int e = 0; e < device::kComputeEngineCount; ++e) {
    const double share = total.engines[e].active_ns / total.total_time_ns;
    if (share > busiest_share) busiest_share = share, busiest = e;
  }
  if (busiest < 0 || busiest_share < kImbalanceBusyShare) return;
  for (int e = 0; e < device::kComputeEngineCount; ++e) {
    if (e != busiest) others = std::max(others, total.engines[e].active_ns / total.total_time_ns);
  }
  if (others > kImbalanceOtherShare) return;
  const auto name = device::engine_name(static_cast<Engine>(busiest));
  out.push_back({"engine_imbalance", fmt::format("the {} engine does most of the work", name),
                 fmt::format("{} is active {:.0f}% of the time, no other compute engine more than {:.0f}%", name,
                             100 * busiest_share, 100 * others),
                 "spread independent work over engines (activations on ScalarE, elementwise on VectorE, "
                 "reductions through TensorE) and overlap it with DMA",
                 total.engines[busiest].active_ns * 0.5 * (1 - others)});
}

void low_tensor_use(const ProfileDir& profile, std::vector<Insight>& out) {
  for (const TracedExecutable& traced : profile.traced) {
    const Summary s = summarize_traced(profile, traced);
    if (s.matmul_count == 0 || s.hfu >= kLowTensorHfu) continue;
    out.push_back({"low_tensor_use", fmt::format("'{}' keeps TensorE {:.0f}% busy (HFU)", s.name, 100 * s.hfu),
                   fmt::format("{} matmuls, {:.3g} FLOPs in {}; TensorE active {:.0f}% of the time, adjusted FLOPs "
                               "{:.3g} (fp32 operands cost x{})", s.matmul_count, s.hardware_flops,
                               us(s.total_time_ns), 100 * s.engines[0].active_ns / s.total_time_ns,
                               s.adjusted_hardware_flops, profile.manifest.device.tensor.fp32_cost_factor),
                   "use bf16 operands, moving tiles of the full free size (512), and prefetch the next tiles' DMA "
                   "while the current matmuls run",
                   s.total_time_ns * (1 - s.hfu)});
  }
}

void excess_hbm(const ProfileDir& profile, std::vector<Insight>& out) {
  for (const TracedExecutable& traced : profile.traced) {
    const Summary s = summarize_traced(profile, traced);
    if (s.min_hbm_bytes == 0 || double(s.hbm_bytes()) < kExcessHbmFactor * double(s.min_hbm_bytes)) continue;
    const double excess = double(s.hbm_bytes() - s.min_hbm_bytes);
    out.push_back({"excess_hbm", fmt::format("'{}' moves {:.1f}x the HBM bytes it needs", s.name,
                                             double(s.hbm_bytes()) / double(s.min_hbm_bytes)),
                   fmt::format("{} HBM bytes against a minimum of {} (inputs read once, outputs written once)",
                               s.hbm_bytes(), s.min_hbm_bytes),
                   "keep intermediates and reused tiles in SBUF instead of round-tripping through HBM",
                   excess / profile.manifest.device.hbm.bytes_per_ns});
  }
}

// A core that waits for its peers at collectives: the slowest rank sets the pace.
void collective_wait(const ProfileDir& profile, std::vector<Insight>& out) {
  const auto& distributed = profile.manifest.distributed;
  if (!distributed || distributed->collectives == 0 || !profile.trace) return;
  const CollectiveSummary s =
      collective_summary({{static_cast<int>(distributed->rank), (std::filesystem::path(profile.path) / "trace.json").string()}},
                         distributed->link_bytes_per_ns);
  const CollectiveLane* straggler = nullptr;
  for (const CollectiveLane& l : s.lanes) {
    if (l.last_arrivals > 0 && (!straggler || l.last_arrivals > straggler->last_arrivals)) straggler = &l;
  }
  for (const CollectiveLane& l : s.lanes) {
    if (l.span_ns <= 0 || l.wait_ns / l.span_ns < kIdleShareWorthReporting) continue;
    out.push_back({"collective_wait",
                   fmt::format("NeuronCore {} (rank {}) waits {:.0f}% of its time for its peers at collectives", l.core,
                               l.rank, 100 * l.wait_ns / l.span_ns),
                   fmt::format("{} collectives; waiting {} of a {} span (cc_exec_barrier){}", l.collectives, us(l.wait_ns),
                               us(l.span_ns),
                               straggler ? fmt::format("; core {} of rank {} reached {} of them last", straggler->core,
                                                       straggler->rank, straggler->last_arrivals)
                                         : std::string()),
                   "give every rank the same work before each collective (shard evenly; the host dispatching to each "
                   "core in turn delays the last ones: compile the stages so each is one launch), or queue work that "
                   "does not need the collective's result before it so the core computes while it waits",
                   l.wait_ns});
  }
}

}  // namespace

std::vector<Insight> insights(const ProfileDir& profile) {
  std::vector<Insight> out;
  const Summary total = summarize_profile(profile);
  idle_gaps(profile, out);
  tiny_executions(profile, total, out);
  small_dma(profile, total, out);
  engine_imbalance(total, out);
  low_tensor_use(profile, out);
  excess_hbm(profile, out);
  collective_wait(profile, out);
  std::stable_sort(out.begin(), out.end(),
                   [](const Insight& a, const Insight& b) { return a.potential_saving_ns > b.potential_saving_ns; });
  return out;
}

}  // namespace sightline::analysis
