#include "compiler/engine_balance.h"

#include <algorithm>
#include <functional>
#include <tuple>

namespace sightline::compiler {

double engine_ns(const device::Spec& spec, const device::EngineSpec& e, double elements, int inputs, DType dtype,
                 bool accumulate) {
  const double rate = dtype_size(dtype) == 2 ? e.elements_per_cycle_16bit : e.elements_per_cycle_32bit;
  return e.cycles_to_ns(spec.access_overhead_cycles + e.static_overhead_cycles + inputs * elements / rate +
                        (accumulate ? e.accumulate_extra_cycles : 0));
}

std::vector<int> place(const std::vector<Choice>& choices, const Loads& fixed, std::vector<int> engine_of,
                       double tiles, double pace_floor) {
  constexpr size_t kExhaustive = 8;
  const size_t m = choices.size();
  std::vector<int> best(m, kOnVector), trial(m, kOnVector);
  if (m > kExhaustive) {
    std::vector<size_t> order(m);
    for (size_t i = 0; i < m; ++i) order[i] = i;
    auto fastest = [&](size_t i) { return *std::min_element(choices[i].ns.begin(), choices[i].ns.end()); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fastest(a) > fastest(b); });
    Loads load = fixed;
    for (size_t i : order) {
      int pick = kOnVector;
      double pick_end = kCannot;
      for (int e = 0; e < 3; ++e) {
        const double end = load[static_cast<size_t>(e)] + choices[i].ns[static_cast<size_t>(e)];
        if (end < pick_end) pick = e, pick_end = end;
      }
      load[static_cast<size_t>(pick)] = pick_end;
      best[i] = pick;
    }
    return best;
  }
  double best_time = kCannot;
  int best_changes = std::numeric_limits<int>::max();
  std::function<void(size_t, Loads, double)> visit = [&](size_t i, Loads load, double sum) {
    if (i == m) {
      const double peak = *std::max_element(load.begin(), load.end());
      for (size_t c = 0; c < m; ++c) engine_of[choices[c].k] = trial[c];
      int changes = 0, last = -1;
      for (int e : engine_of) {
        if (e < 0) continue;
        changes += last >= 0 && e != last;
        last = e;
      }
      const double time = (tiles - 1) * std::max(peak, pace_floor) + sum;
      if (std::tie(time, changes) < std::tie(best_time, best_changes)) {
        best_time = time, best_changes = changes;
        best = trial;
      }
      return;
    }
    for (int e = 0; e < 3; ++e) {
      const double ns = choices[i].ns[static_cast<size_t>(e)];
      if (ns == kCannot) continue;
      trial[i] = e;
      Loads next = load;
      next[static_cast<size_t>(e)] += ns;
      visit(i + 1, next, sum + ns);
    }
  };
  visit(0, fixed, 0.0);
  return best;
}

namespace {

// A tile's steps in list-scheduling order on `engine`, from an idle core with the evacuation (Vector)
// first: repeatedly the ready step that can start first, ties in step order.
std::vector<size_t> list_order(const std::vector<EpilogueStepCost>& steps, const std::vector<int>& engine,
                               double evacuation_ns) {
  const size_t n = steps.size();
  Loads free{evacuation_ns, 0.0, 0.0};
  std::vector<double> done(n, 0.0);
  std::vector<bool> emitted(n, false);
  std::vector<size_t> order;
  while (order.size() < n) {
    size_t pick = n;
    double pick_start = kCannot;
    for (size_t s = 0; s < n; ++s) {
      if (emitted[s]) continue;
      double start = free[static_cast<size_t>(engine[s])];
      bool ready = true;
      for (size_t a : steps[s].after) {
        ready &= emitted[a];
        start = std::max(start, done[a]);
      }
      if (ready && start < pick_start) pick = s, pick_start = start;
    }
    const size_t e = static_cast<size_t>(engine[pick]);
    done[pick] = pick_start + steps[pick].ns[e];
    free[e] = done[pick];
    emitted[pick] = true;
    order.push_back(pick);
  }
  return order;
}

// The time of `tiles` tiles of the pipeline schedule_epilogue describes.
double time_epilogue(const std::vector<EpilogueStepCost>& steps, const std::vector<int>& engine,
                     const std::vector<size_t>& order, double tensor_ns, double evacuation_ns, size_t tiles,
                     size_t buffers) {
  Loads free{};
  double tensor_free = 0, end = 0;
  std::vector<double> evacuated(tiles, 0.0), stored(tiles, 0.0), done(steps.size(), 0.0);
  // Tiles accumulate in groups of half the banks, the K tiles outermost, so a group's tiles are done
  // together when its last matmul is (the matmul kernel's resident schedule; one tile per group with two).
  const size_t group = std::max<size_t>(1, buffers / 2);
  for (size_t t = 0; t < tiles; ++t) {
    if (t % group == 0) {
      double banks = 0;
      for (size_t u = t; u < t + group && u < tiles; ++u) {
        if (u >= buffers) banks = std::max(banks, evacuated[u - buffers]);
      }
      tensor_free = std::max(tensor_free, banks) + tensor_ns * static_cast<double>(std::min(group, tiles - t));
    }
    const double buffer = t >= buffers ? stored[t - buffers] : 0.0;
    evacuated[t] = std::max({free[kOnVector], tensor_free, buffer}) + evacuation_ns;
    free[kOnVector] = evacuated[t];
    double last = evacuated[t];
    for (size_t s : order) {
      const size_t e = static_cast<size_t>(engine[s]);
      double start = std::max(free[e], evacuated[t]);
      for (size_t a : steps[s].after) start = std::max(start, done[a]);
      done[s] = start + steps[s].ns[e];
      free[e] = done[s];
      last = std::max(last, done[s]);
    }
    stored[t] = last;
    end = std::max(end, last);
  }
  return end;
}

}  // namespace

EpilogueSchedule schedule_epilogue(const std::vector<EpilogueStepCost>& steps, double tensor_ns,
                                   double evacuation_ns, size_t tiles, size_t buffers) {
  constexpr size_t kExhaustive = 8;
  buffers = std::max<size_t>(buffers, 1);
  const size_t n = steps.size();
  std::vector<int> fastest(n, kOnVector);
  std::vector<size_t> flexible;  // steps with more than one engine
  for (size_t s = 0; s < n; ++s) {
    const Loads& ns = steps[s].ns;
    fastest[s] = static_cast<int>(std::min_element(ns.begin(), ns.end()) - ns.begin());
    if (std::count_if(ns.begin(), ns.end(), [](double v) { return v != kCannot; }) > 1) flexible.push_back(s);
  }
  tiles = std::max<size_t>(tiles, 1);
  EpilogueSchedule best;
  best.ns = kCannot;
  int best_moved = 0;
  std::vector<int> engine = fastest;
  auto visit = [&](auto&& self, size_t i, int moved) -> void {
    if (i == flexible.size()) {
      std::vector<size_t> order = list_order(steps, engine, evacuation_ns);
      const double ns = time_epilogue(steps, engine, order, tensor_ns, evacuation_ns, tiles, buffers);
      if (ns < best.ns || (ns == best.ns && moved < best_moved)) {
        best = {engine, std::move(order), ns};
        best_moved = moved;
      }
      return;
    }
    const size_t s = flexible[i];
    for (int e = 0; e < 3; ++e) {
      if (steps[s].ns[static_cast<size_t>(e)] == kCannot) continue;
      engine[s] = e;
      self(self, i + 1, moved + (e != fastest[s]));
    }
    engine[s] = fastest[s];
  };
  if (flexible.size() <= kExhaustive) {
    visit(visit, 0, 0);
  } else {
    std::vector<size_t> order = list_order(steps, fastest, evacuation_ns);
    const double ns = time_epilogue(steps, fastest, order, tensor_ns, evacuation_ns, tiles, buffers);
    best = {fastest, std::move(order), ns};
  }
  return best;
}

}  // namespace sightline::compiler
