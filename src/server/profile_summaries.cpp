#include "server/profile_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include "analysis/trace_json.h"
#include "formats/neff.h"
#include "sightline/device/isa.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

// The index's summaries of a profile (the last of its jobs): the operator table, computed by the
// profiler's own key_averages over trace.json as the CLI reads it, and one device execution from an
// executable's instruction trace, one row per engine and DMA queue.
namespace sightline::server {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::optional<uint64_t> parse_neff_hash(std::string_view neff) {
  if (neff.starts_with("neff_")) neff.remove_prefix(5);
  if (neff.ends_with(".neff")) neff.remove_suffix(5);
  if (neff.size() != 16) return std::nullopt;
  uint64_t hash = 0;
  auto [end, error] = std::from_chars(neff.data(), neff.data() + neff.size(), hash, 16);
  if (error != std::errc{} || end != neff.data() + neff.size()) return std::nullopt;
  return hash;
}

std::string engine_row_name(device::Engine engine) {
  switch (engine) {
    case device::Engine::tensor:
      return "Tensor";
    case device::Engine::vector:
      return "Vector";
    case device::Engine::scalar:
      return "Scalar";
    case device::Engine::gpsimd:
      return "GpSimd";
    case device::Engine::dma:
      return "DMA";
  }
  return "DMA";
}

}  // namespace

namespace {

// The operator table as the Explorer shows it: every row in `sightline table`'s default order
// (self device time, descending), each with the cells the text table prints for it (the profiler's
// own formatting: KeyAverages::table_cells), the header and the footer lines, so the Explorer's
// table is the CLI's byte for byte; the numbers beside them are for sorting and totals.
json key_averages_json(const profiler::KeyAverages& averages, const std::string& device) {
  const profiler::TableOptions options{.sort_by = "self_device_time_total", .row_limit = -1};
  const std::vector<const profiler::FunctionEventAvg*> rows = averages.selected_rows(options);
  const profiler::TableCells cells = averages.table_cells(options);
  json table = json::array();
  double self_cpu_total = 0, self_device_total = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const profiler::FunctionEventAvg& row = *rows[r];
    self_cpu_total += static_cast<double>(row.self_cpu_time_total_ns) / 1e3;
    self_device_total += static_cast<double>(row.self_device_time_total_ns) / 1e3;
    table.push_back({{"name", row.key},
                     {"count", row.count},
                     {"cpu_total_us", static_cast<double>(row.cpu_time_total_ns) / 1e3},
                     {"self_cpu_us", static_cast<double>(row.self_cpu_time_total_ns) / 1e3},
                     {"device_total_us", static_cast<double>(row.device_time_total_ns) / 1e3},
                     {"self_device_us", static_cast<double>(row.self_device_time_total_ns) / 1e3},
                     {"cells", cells.rows[r]}});
  }
  std::string upper = device;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  json notes = json::array();
  for (const std::string& note : averages.notes()) notes.push_back(note);
  return json{{"source", "trace.json through analysis::trace_json and profiler::key_averages"},
              {"device", upper},
              {"headers", cells.headers},
              {"rows", table},
              {"footer", cells.footer},
              {"notes", notes},
              {"self_cpu_total_us", self_cpu_total},
              {"self_device_total_us", self_device_total}};
}

}  // namespace

void ProfileIndex::table_from_runs(const std::vector<formats::TraceRun>& runs, const std::string& origin) {
  // One reader and one table: the runs the index reads, built into the trace the CLI's `sightline
  // table` builds of them (analysis/trace_json), averaged by the profiler's own key_averages, so the
  // Explorer's table is the live one (ProfilerStep#N merged into ProfilerStep*, torch's self times).
  // A trace the index reads but the analysis reader refuses is the profile's fault (422 on request).
  try {
    const std::string device = analysis::trace_json_runs_device_name(runs);
    const profiler::CollectedTrace trace = analysis::trace_json_build(runs, *trace_file_, origin);
    key_averages_ = key_averages_json(profiler::key_averages(trace, {.device_name = device}), device);
  } catch (const Error& error) {
    key_averages_error_ = fmt::format("the operator table cannot be built: {}", error.what());
  }
}

nlohmann::json ProfileIndex::key_averages() const {
  // A partial index: the complete one's table, built as its runs are read (waiting for them here
  // instead of reading the file a second time beside them).
  if (completion_ != nullptr) {
    wait_complete();
    return completed()->key_averages();
  }
  if (key_averages_error_) throw RequestError(422, *key_averages_error_);
  return *key_averages_;
}

std::shared_ptr<const ProfileIndex::DeviceTrace> ProfileIndex::device_trace(uint64_t neff_hash,
                                                                          uint32_t core) const {
  std::lock_guard lock(device_mutex_);
  if (auto it = device_traces_.find({neff_hash, core}); it != device_traces_.end()) return it->second;
  const formats::ManifestFile* ntff_file = nullptr;
  const formats::ManifestFile* neff_file = nullptr;
  for (const formats::ManifestFile& file : manifest_.files) {
    if (file.neff_hash != neff_hash) continue;
    if (file.kind == formats::ManifestFileKind::ntff && file.core == core) ntff_file = &file;
    if (file.kind == formats::ManifestFileKind::neff) neff_file = &file;
  }
  if (!ntff_file || !neff_file) {
    throw RequestError(
        404,
        fmt::format("no instruction trace of executable {:016x} on core {} in this profile", neff_hash, core));
  }
  auto loaded = std::make_shared<DeviceTrace>();
  try {
    loaded->trace = formats::ntff_load((dir_ / ntff_file->path).string());
    loaded->executable = formats::neff_load((dir_ / neff_file->path).string());
  } catch (const std::exception& error) {
    throw RequestError(422, fmt::format("instruction trace unreadable: {}", error.what()));
  }
  device_traces_.emplace(std::pair{neff_hash, core}, loaded);
  return loaded;
}


nlohmann::json ProfileIndex::device_execution(std::string_view neff, uint32_t core,
                                              std::optional<uint64_t> sequence) const {
  const auto hash = parse_neff_hash(neff);
  if (!hash) {
    throw RequestError(400,
                       fmt::format("neff '{}' is neither a 16-hex-digit hash nor neff_<hash>.neff", neff));
  }
  const auto loaded = device_trace(*hash, core);
  const formats::NtffTrace& trace = loaded->trace;
  const device::Executable& executable = loaded->executable;
  if (trace.executions.empty()) throw RequestError(404, "the instruction trace holds no execution");
  const formats::NtffExecution* execution = &trace.executions.front();
  if (sequence) {
    auto it = std::find_if(trace.executions.begin(), trace.executions.end(),
                           [&](const formats::NtffExecution& e) { return e.seq == *sequence; });
    if (it == trace.executions.end()) {
      throw RequestError(
          404, fmt::format("execution with sequence {} was not captured on core {}", *sequence, core));
    }
    execution = &*it;
  }
  // One row per compute engine, then one per DMA queue that has records.
  std::map<std::pair<int, int>, json> rows;
  for (int engine = 0; engine < device::kComputeEngineCount; ++engine) {
    rows[{engine, 0}] = json::array();
  }
  for (const device::InstructionRecord& record : execution->records) {
    const bool dma = record.engine == device::Engine::dma;
    const std::pair<int, int> key{static_cast<int>(record.engine), dma ? record.queue : 0};
    auto& row = rows[key];
    if (row.is_null()) row = json::array();
    row.push_back(
        {{"start", record.start_ns},
         {"dur", record.end_ns - record.start_ns},
         {"op", record.source_op == device::kNoSourceOp ? -1 : static_cast<int64_t>(record.source_op)},
         {"opcode", std::string(device::opcode_name(record.opcode))},
         {"hbm_read", record.hbm_bytes_read},
         {"hbm_written", record.hbm_bytes_written},
         {"onchip", record.onchip_bytes_read + record.onchip_bytes_written},
         {"flops", record.flops},
         {"semaphore_wait", record.semaphore_wait_ns}});
  }
  json result_rows = json::array();
  for (auto& [key, records] : rows) {
    const auto engine = static_cast<device::Engine>(key.first);
    const std::string name =
        engine == device::Engine::dma ? fmt::format("DMA q{}", key.second) : engine_row_name(engine);
    result_rows.push_back({{"name", name},
                           {"engine", std::string(device::engine_name(engine))},
                           {"queue", key.second},
                           {"records", std::move(records)}});
  }
  return {{"neff", fmt::format("{:016x}", *hash)},
          {"executable", executable.name},
          {"core", core},
          {"sequence", execution->seq},
          {"correlation", execution->correlation},
          {"start_ns", execution->start_ns},
          {"duration_ns", execution->duration_ns},
          {"executions", trace.executions.size()},
          {"source_ops", executable.source_ops},
          {"rows", result_rows}};
}

}  // namespace sightline::server
