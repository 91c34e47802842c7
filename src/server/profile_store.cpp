#include "server/profile_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <system_error>
#include <utility>

#include "analysis/collectives.h"
#include "analysis/compare.h"
#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/roofline.h"
#include "analysis/sqlite.h"
#include "analysis/trace_json.h"
#include "formats/manifest.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "formats/output_dir.h"
#include "profiler/chrome_trace.h"
#include "profiler/lane_names.h"
#include "sightline/error.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxNameLength = 200;

bool is_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '+' || c == '@';
}

json manifest_summary(const formats::Manifest& manifest) {
  uint64_t bytes = 0;
  for (const formats::ManifestFile& file : manifest.files) bytes += file.bytes;
  return {{"created_utc", manifest.created_utc},
          {"sightline_version", manifest.sightline_version},
          {"device", manifest.device.name},
          {"core_version", manifest.device.core_version},
          {"modes", manifest.modes},
          {"captured_cores", manifest.captured_cores},
          {"events",
           {{"framework", manifest.events.framework},
            {"runtime", manifest.events.runtime},
            {"hardware", manifest.events.hardware},
            {"instruction_records", manifest.events.instruction_records}}},
          {"dropped", manifest.dropped.total()},
          // Which host clock the times come from, and what the simulator cost (measured, apart).
          {"timing",
           {{"host_clock", manifest.timing.host_clock.empty() ? "unknown" : manifest.timing.host_clock},
            {"functional", manifest.timing.functional},
            {"simulation_wall_ns", manifest.timing.simulation_wall_ns},
            {"left_out", manifest.timing.not_completed + manifest.timing.earlier_steps}}},
          {"files", manifest.files.size()},
          {"bytes", bytes}};
}


json roofline_json(const analysis::Roofline& roof) {
  json points = json::array();
  auto add = [&](const char* kind, const analysis::RooflinePoint& p) {
    points.push_back({{"kind", kind},
                      {"name", p.name},
                      {"intensity", p.intensity},
                      {"achieved_flops_per_s", p.achieved_flops_per_s},
                      {"attainable_flops_per_s", p.attainable_flops_per_s},
                      {"bound", analysis::bound_name(p.bound)},
                      {"roof", p.roof},
                      {"compute_roof_flops_per_s", p.compute_roof_flops_per_s},
                      {"efficiency", p.efficiency},
                      {"time_us", p.time_ns / 1000},
                      {"executions", p.executions},
                      {"flops", p.flops},
                      {"hbm_bytes", p.hbm_bytes}});
  };
  for (const analysis::RooflinePoint& p : roof.executables) add("executable", p);
  for (const analysis::RooflinePoint& p : roof.ops) add("op", p);
  json roofs = json::array();
  for (const analysis::Roof& r : roof.roofs) roofs.push_back({{"name", r.name}, {"flops_per_s", r.flops_per_s}});
  return {{"device", roof.device},
          {"roofs", std::move(roofs)},
          {"peak_flops_per_s", roof.peak_flops_per_s},
          {"hbm_bytes_per_s", roof.hbm_bytes_per_s},
          {"ridge_point", roof.ridge_point},
          {"points", std::move(points)}};
}

// Messages of readers that ran on the staging directory name the file by its staging path; the user
// knows it by the profile name.
std::string without_path(std::string message, const std::string& path, std::string_view name) {
  for (size_t at = message.find(path); at != std::string::npos; at = message.find(path, at + name.size())) {
    message.replace(at, path.size(), name);
  }
  return message;
}

enum class UploadKind { manifest, trace, system_trace, neff, ntff };

// What an uploaded file is, from its name; nullopt for names a profile directory does not hold.
std::optional<UploadKind> upload_kind(std::string_view name) {
  if (name == formats::kManifestFileName) return UploadKind::manifest;
  if (name == "trace.json") return UploadKind::trace;
  if (name == "system_trace.json") return UploadKind::system_trace;
  if (name.starts_with("neff_") && name.ends_with(".neff") && name.size() == 5 + 16 + 5) return UploadKind::neff;
  if (formats::ntff_parse_file_name(name)) return UploadKind::ntff;
  return std::nullopt;
}

// The file name inside the profile directory: the last component of what the browser sent (a
// directory upload sends "folder/trace.json"). Refuses "..", hidden and unknown names.
std::string upload_file_name(std::string_view sent) {
  if (sent.empty()) throw RequestError(400, "an uploaded file has no file name");
  std::string_view rest = sent;
  std::string_view last;
  while (true) {
    const size_t slash = rest.find_first_of("/\\");
    const std::string_view part = rest.substr(0, slash);
    if (part == "..") {
      throw RequestError(400, fmt::format("uploaded file '{}' refers to a parent directory ('..'); send the "
                                          "files of one profile directory",
                                          sent));
    }
    if (slash == std::string_view::npos) {
      last = part;
      break;
    }
    rest = rest.substr(slash + 1);
  }
  if (last.empty() || last.front() == '.' || !std::all_of(last.begin(), last.end(), is_name_character)) {
    throw RequestError(400, fmt::format("uploaded file '{}' has no usable name: use the names a profile "
                                        "directory holds (letters, digits and -_.+@, not starting with a dot)",
                                        sent));
  }
  if (!upload_kind(last)) {
    throw RequestError(400, fmt::format("uploaded file '{}' is not part of a profile directory: expected "
                                        "manifest.json, trace.json, system_trace.json, neff_<hash>.neff or "
                                        "<hash>_instid_0_vnc_<core>.ntff",
                                        sent));
  }
  return std::string(last);
}

// A trace.json for an executable + instruction-trace pair: one nc_exec_running event per captured
// execution on the core's hardware lane, written by the profiler's own exporter so every reader of
// profile directories accepts it.
void write_pair_trace(const fs::path& path, const device::Executable& exe, const formats::NtffTrace& trace) {
  profiler::CollectedTrace collected;
  const int core = static_cast<int>(trace.core);
  int64_t first = INT64_MAX, last = INT64_MIN;
  const std::string neff = formats::neff_file_name(exe);
  for (const formats::NtffExecution& execution : trace.executions) {
    profiler::FunctionEvent event;
    event.name = "nc_exec_running";
    event.kind = profiler::EventKind::device_exec;
    event.device_type = profiler::DeviceType::privateuse1;
    event.device_index = core;
    event.id = execution.correlation;
    event.start_ns = execution.start_ns;
    event.end_ns = execution.start_ns + static_cast<int64_t>(std::ceil(execution.duration_ns));
    event.args.push_back({"neuron core", static_cast<int64_t>(core)});
    event.args.push_back({"sequence", static_cast<int64_t>(execution.seq)});
    event.args.push_back({"executable", exe.name});
    event.args.push_back({"neff", neff});
    first = std::min(first, event.start_ns);
    last = std::max(last, event.end_ns);
    collected.events.push_back(std::move(event));
  }
  if (collected.events.empty()) first = last = 0;
  std::sort(collected.events.begin(), collected.events.end(),
            [](const profiler::FunctionEvent& a, const profiler::FunctionEvent& b) {
              return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
            });
  collected.devices.push_back({core, profiler::hardware_lane_name("neuron", core), fmt::format("neuron:{}", core),
                               5'000'000 + core});
  collected.resources.push_back({core, 0, profiler::hardware_lane_name("neuron", core), 0});
  // NTFF start times are host-clock ns already: the window starts at the first execution.
  collected.window_start_ns = first;
  collected.window_end_ns = last;
  collected.wall_clock_at_window_start_ns = first;
  profiler::ChromeTraceOptions options;
  options.device_name = "neuron";
  options.trace_name = exe.name;
  options.system_lanes = true;
  options.instance = "upload";
  profiler::export_chrome_trace(collected, path.string(), options);
}

// The collective table of `sightline view` (analysis/collectives.h) as the Summary page shows it.
json collectives_json(const analysis::ProfileDir& profile) {
  const formats::ManifestDistributed& distributed = *profile.manifest.distributed;
  const analysis::CollectiveSummary s = analysis::collective_summary(
      {{static_cast<int>(distributed.rank), (fs::path(profile.path) / "trace.json").string()}},
      distributed.link_bytes_per_ns);
  json lanes = json::array();
  for (const analysis::CollectiveLane& l : s.lanes) {
    lanes.push_back({{"rank", l.rank}, {"core", l.core}, {"collectives", l.collectives},
                     {"active_us", l.active_ns / 1000}, {"wait_us", l.wait_ns / 1000}, {"busy_us", l.busy_ns / 1000},
                     {"span_us", l.span_ns / 1000}, {"last_arrivals", l.last_arrivals}, {"late_us", l.late_ns / 1000}});
  }
  return {{"world_size", distributed.world_size}, {"collectives", s.collectives}, {"active_us", s.active_ns / 1000},
          {"wait_us", s.wait_ns / 1000}, {"collective_time_us", s.collective_time_ns / 1000},
          {"bus_bytes", s.bus_bytes}, {"bus_gbps", s.bus_bytes_per_ns}, {"link_gbps", s.link_bytes_per_ns},
          {"lanes", lanes}};
}

}  // namespace

ProfileStore::ProfileStore(fs::path root) {
  std::error_code error;
  root_ = fs::canonical(root, error);
  if (error || !fs::is_directory(root_)) {
    throw RequestError(400, fmt::format("profile root '{}' is not a readable directory", root.string()));
  }
  // What a server killed mid-upload (or an export killed mid-write) left in the root: the one writer's
  // recovery, which leaves the staging of a live process alone. A read-only root stays as it is.
  try {
    (void)formats::output_dir_recover_all(root_.string());
  } catch (const std::exception&) {
  }
}

fs::path ProfileStore::profile_path(std::string_view name) const {
  const bool valid = !name.empty() && name.size() <= kMaxNameLength && name.front() != '.' &&
                     std::all_of(name.begin(), name.end(), is_name_character);
  if (!valid) {
    throw RequestError(400,
                       fmt::format("'{}' is not a profile name: use letters, digits and -_.+@, not starting "
                                   "with a dot",
                                   name));
  }
  // A staging or set-aside sibling of the one writer (an upload or export in progress) is no profile.
  if (formats::output_dir_is_sibling_name(name)) {
    throw RequestError(400, fmt::format("'{}' is not a profile name: a name ending in .tmp-, .old- or .kept- and "
                                        "<number>-<number> is what an export leaves while it works",
                                        name));
  }
  const fs::path path = root_ / std::string(name);
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(path, error);
  if (error || resolved.parent_path() != root_) {
    throw RequestError(403, fmt::format("profile '{}' resolves outside the profile root", name));
  }
  return path;
}

json ProfileStore::list() const {
  json profiles = json::array();
  std::vector<fs::path> directories;
  std::error_code error;
  // Nothing about one entry (unreadable, a dangling link, a damaged manifest) may fail the listing:
  // such a profile is listed with ok: false and its error.
  for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    std::error_code entry_error;
    if (name.empty() || name.front() == '.' || formats::output_dir_is_sibling_name(name) || !entry.is_directory(entry_error)) continue;
    directories.push_back(entry.path());
  }
  std::sort(directories.begin(), directories.end());
  for (const fs::path& directory : directories) {
    const std::string name = directory.filename().string();
    std::error_code exists_error;
    if (!fs::exists(directory / formats::kManifestFileName, exists_error)) continue;
    json profile = {{"name", name}};
    try {
      profile["manifest"] = manifest_summary(formats::manifest_load(directory.string()));
      profile["ok"] = true;
    } catch (const std::exception& failure) {
      profile["ok"] = false;
      profile["error"] = failure.what();
    }
    profiles.push_back(std::move(profile));
  }
  return {{"root", root_.filename().string()}, {"profiles", profiles}};
}

std::shared_ptr<const ProfileIndex> ProfileStore::open(std::string_view name) {
  const fs::path path = profile_path(name);
  {
    std::lock_guard lock(mutex_);
    if (auto it = cache_.find(name); it != cache_.end()) return it->second;
  }
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  // Indexed outside the lock, so other profiles stay responsive while a large one loads.
  const uint64_t generation = generation_of(name);
  auto index = ProfileIndex::load(path);
  std::lock_guard lock(mutex_);
  if (generation_of_locked(name) == generation) cache_.emplace(std::string(name), index);
  return index;
}

std::shared_ptr<const analysis::ProfileDir> ProfileStore::analysis(std::string_view name) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = analyses_.find(name); it != analyses_.end()) return it->second;
  }
  const uint64_t generation = generation_of(name);
  auto loaded = std::make_shared<const analysis::ProfileDir>(load_analysis(name, /*with_trace=*/true));
  std::lock_guard lock(mutex_);
  if (generation_of_locked(name) == generation) analyses_.emplace(std::string(name), loaded);
  return loaded;
}

analysis::ProfileDir ProfileStore::load_analysis(std::string_view name, bool with_trace) const {
  const fs::path path = profile_path(name);
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  try {
    return analysis::profile_dir_load(path.string(), {.load_trace_json = with_trace});
  } catch (const Error& error) {
    throw RequestError(422, fmt::format("profile '{}' cannot be analysed: {}", name,
                                        without_path(error.what(), root_.string() + "/", "")));
  }
}

json ProfileStore::summary(std::string_view name) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = summaries_.find(name); it != summaries_.end()) return *it->second;
  }
  const uint64_t generation = generation_of(name);
  // The summary and the roofline read the captured executions only, never trace.json (one
  // population, analysis/insights.h): a profile of a million events answers as fast as a small one.
  // Collectives are only in trace.json (cc_running and cc_exec_barrier on the CC lanes): a profile
  // that ran some (one rank, or ranks merged) is read with it, for the collective_wait insight and the
  // per-lane table, as `sightline view` reports them.
  analysis::ProfileDir profile = load_analysis(name, /*with_trace=*/false);
  const auto& distributed = profile.manifest.distributed;
  const bool collectives = distributed && distributed->collectives > 0;
  if (collectives) profile = load_analysis(name, /*with_trace=*/true);
  json out;
  try {
    out = json::parse(analysis::report_summary_json(profile));
    out["roofline"] = roofline_json(analysis::roofline(profile));
    if (collectives) out["collectives"] = collectives_json(profile);
  } catch (const Error& error) {
    throw RequestError(422, fmt::format("profile '{}' cannot be summarized: {}", name, error.what()));
  }
  std::lock_guard lock(mutex_);
  if (generation_of_locked(name) == generation) {
    summaries_.emplace(std::string(name), std::make_shared<const json>(out));
  }
  return out;
}

json ProfileStore::query(std::string_view name, const std::string& sql) {
  const fs::path path = profile_path(name);
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  if (sql.empty()) throw RequestError(400, "query needs a non-empty sql parameter");
  std::string db;
  {
    // One build of the cache at a time: two first queries must not both write it.
    std::lock_guard lock(query_mutex_);
    try {
      db = analysis::sqlite_cached(path.string());
    } catch (const Error& error) {
      throw RequestError(422, fmt::format("profile '{}' has no SQL database: {}", name, error.what()));
    }
  }
  try {
    const analysis::QueryResult result =
        analysis::sqlite_query(db, sql, {.allow_attach = false, .max_rows = kMaxQueryRows, .max_seconds = kMaxQuerySeconds});
    return json::parse(analysis::query_json(result));
  } catch (const Error& error) {
    throw RequestError(400, without_path(error.what(), db, fmt::format("{}/{}", name, analysis::kSqliteCacheFileName)));
  }
}

json ProfileStore::compare(std::string_view a, std::string_view b) {
  const auto profile_a = analysis(a);
  const auto profile_b = analysis(b);
  analysis::Comparison comparison;
  try {
    comparison = analysis::compare(*profile_a, *profile_b);
  } catch (const Error& error) {
    throw RequestError(422, fmt::format("profiles '{}' and '{}' cannot be compared: {}", a, b, error.what()));
  }
  json out = json::parse(analysis::compare_json(comparison));
  out["a"] = std::string(a);
  out["b"] = std::string(b);
  out["total_a_us"] = comparison.total_a_ns / 1000;
  out["total_b_us"] = comparison.total_b_ns / 1000;
  return out;
}

void ProfileStore::remove(std::string_view name) {
  const fs::path path = profile_path(name);
  std::lock_guard lock(mutex_);
  if (!fs::is_directory(path)) throw RequestError(404, fmt::format("no profile named '{}'", name));
  if (fs::is_symlink(path) || !fs::exists(path / formats::kManifestFileName)) {
    throw RequestError(
        409, fmt::format("'{}' is not a profile directory (no manifest.json); not deleting it", name));
  }
  std::error_code error;
  fs::remove_all(path, error);
  forget(name);
  if (error)
    throw RequestError(409, fmt::format("profile '{}' could not be deleted: {}", name, error.message()));
}

void ProfileStore::forget(std::string_view name) {
  if (auto it = cache_.find(name); it != cache_.end()) cache_.erase(it);
  if (auto it = analyses_.find(name); it != analyses_.end()) analyses_.erase(it);
  if (auto it = summaries_.find(name); it != summaries_.end()) summaries_.erase(it);
  auto [it, inserted] = generations_.try_emplace(std::string(name), 0);
  ++it->second;
}

uint64_t ProfileStore::generation_of(std::string_view name) {
  std::lock_guard lock(mutex_);
  return generation_of_locked(name);
}

uint64_t ProfileStore::generation_of_locked(std::string_view name) const {
  auto it = generations_.find(name);
  return it == generations_.end() ? 0 : it->second;
}

UploadStaging::UploadStaging(const fs::path& target, std::string name)
    : staging_(target.string(), formats::OutputDirReplace::never), name_(std::move(name)) {}

template <class Step>
void UploadStaging::on_disk(Step&& step) {
  try {
    step();
  } catch (const Error& error) {
    throw RequestError(500, fmt::format("cannot write upload '{}' into the profile root: {}", name_,
                                        without_path(error.what(), staging_.path().string(), name_)));
  }
}

void UploadStaging::begin_file(std::string_view sent_name) {
  const std::string file_name = upload_file_name(sent_name);
  if (std::find(files_.begin(), files_.end(), file_name) != files_.end()) {
    throw RequestError(400, fmt::format("the upload holds '{}' twice", file_name));
  }
  on_disk([&] { staging_.begin_file(file_name); });
  files_.push_back(file_name);
}

void UploadStaging::append(std::string_view bytes) {
  if (files_.empty()) throw RequestError(500, "upload bytes arrived before any file was begun");
  bytes_ += bytes.size();
  on_disk([&] { staging_.append(bytes); });
}

json ProfileStore::upload(std::string_view name, std::vector<UploadFile> files, const UploadOptions& options) {
  std::unique_ptr<UploadStaging> staging = begin_upload(name);
  for (UploadFile& file : files) {
    staging->begin_file(file.name);
    staging->append(file.content);
    std::string().swap(file.content);  // validation reads the staged file; keep one copy, not two
  }
  return finish_upload(std::move(staging), options);
}

std::unique_ptr<UploadStaging> ProfileStore::begin_upload(std::string_view name) {
  const fs::path target = profile_path(name);
  std::error_code error;
  if (fs::exists(fs::symlink_status(target, error))) {
    throw RequestError(409, fmt::format("a profile named '{}' already exists; delete it first or choose "
                                        "another name",
                                        name));
  }
  try {
    return std::unique_ptr<UploadStaging>(new UploadStaging(target, std::string(name)));
  } catch (const Error& failure) {
    throw RequestError(500, fmt::format("cannot create a staging directory in the profile root: {}",
                                        without_path(failure.what(), root_.string() + "/", "")));
  }
}

namespace {

// What an upload holds, by file name and by kind, and which of the two shapes it has.
struct UploadContents {
  std::set<std::string> by_name;
  std::map<UploadKind, std::vector<std::string>> by_kind;
  bool whole_directory = false;
};

// Throws RequestError(400) for an upload of neither shape.
UploadContents upload_contents(const std::vector<std::string>& files) {
  if (files.empty()) throw RequestError(400, "the upload holds no files");
  UploadContents contents;
  contents.by_name.insert(files.begin(), files.end());
  for (const std::string& file_name : files) contents.by_kind[*upload_kind(file_name)].push_back(file_name);
  contents.whole_directory = contents.by_kind.contains(UploadKind::manifest);
  if (contents.whole_directory && !contents.by_kind.contains(UploadKind::trace)) {
    throw RequestError(400, "the upload has a manifest.json but no trace.json: send the whole profile directory");
  }
  const bool pair = contents.by_kind[UploadKind::neff].size() == 1 && contents.by_kind[UploadKind::ntff].size() == 1 &&
                    contents.by_name.size() == 2;
  if (!contents.whole_directory && !pair) {
    throw RequestError(400, "an upload is either a whole profile directory (manifest.json, trace.json and the "
                            "files the manifest lists) or an executable + instruction-trace pair (exactly one "
                            "neff_<hash>.neff and its <hash>_instid_0_vnc_<core>.ntff)");
  }
  return contents;
}

// A reader's refusal of a staged file, as the user's error: the staging path shown as the upload's name.
[[noreturn]] void refuse_upload(std::string_view name, const fs::path& staging, const std::exception& failure) {
  const std::string message = without_path(failure.what(), staging.string(), std::string(name));
  throw RequestError(400, fmt::format("upload '{}' is not a valid profile: {}", name,
                                      without_path(message, staging.parent_path().string() + "/", "")));
}

// A whole directory: every file manifest.json lists was sent, at its size, and nothing else.
void check_manifest_files(std::string_view name, const fs::path& staging, const std::set<std::string>& sent) {
  const formats::Manifest manifest = formats::manifest_load(staging.string());
  std::set<std::string> listed = {std::string(formats::kManifestFileName)};
  for (const formats::ManifestFile& file : manifest.files) {
    listed.insert(file.path);
    const fs::path path = staging / file.path;
    if (!fs::exists(path)) {
      throw RequestError(400, fmt::format("upload '{}' is incomplete: manifest.json lists '{}', which was not sent; "
                                          "send the whole profile directory", name, file.path));
    }
    if (file.bytes != 0 && fs::file_size(path) != file.bytes) {
      throw RequestError(400, fmt::format("upload '{}': '{}' has {} bytes, manifest.json says {}; the file was "
                                          "truncated or changed", name, file.path, fs::file_size(path), file.bytes));
    }
  }
  for (const std::string& file_name : sent) {
    if (!listed.contains(file_name)) {
      throw RequestError(400, fmt::format("upload '{}': '{}' is not listed in manifest.json", name, file_name));
    }
  }
}

// An executable + instruction-trace pair: checks that they pair, then writes the trace.json and the
// manifest around them that make the staging directory a profile (see the header comment).
void build_pair_profile(std::string_view name, const fs::path& staging, const std::string& neff_name,
                        const std::string& ntff_name, const UploadOptions& options) {
  const device::Executable exe = formats::neff_load((staging / neff_name).string());
  const formats::NtffTrace trace = formats::ntff_load((staging / ntff_name).string());
  const uint64_t hash = formats::neff_hash(exe);
  if (formats::neff_file_name(exe) != neff_name || trace.neff_hash != hash) {
    throw RequestError(400, fmt::format("upload '{}': '{}' is not the instruction trace of '{}' (it pairs with {}); "
                                        "send an executable and its own trace", name, ntff_name, neff_name,
                                        formats::ntff_paired_neff_file_name(trace.neff_hash)));
  }
  device::Spec spec;
  try {
    spec = device::Spec::builtin(options.device);
  } catch (const std::exception& failure) {
    throw RequestError(400, fmt::format("device '{}' is not a built-in spec: {}", options.device, failure.what()));
  }
  write_pair_trace(staging / "trace.json", exe, trace);
  formats::Manifest manifest;
  manifest.created_utc = formats::manifest_now_utc();
  manifest.modes = {"DEVICE"};
  manifest.captured_cores = {trace.core};
  manifest.device = spec;
  manifest.events.hardware = trace.executions.size();
  manifest.events.instruction_records = trace.record_count();
  manifest.files = {
      {formats::ManifestFileKind::trace, "trace.json", {}, {}, fs::file_size(staging / "trace.json")},
      {formats::ManifestFileKind::neff, neff_name, hash, {}, fs::file_size(staging / neff_name)},
      {formats::ManifestFileKind::ntff, ntff_name, hash, trace.core, fs::file_size(staging / ntff_name)}};
  formats::manifest_save(manifest, staging.string());
}

// Every check the analysis readers will make of the staged profile, each with bounded memory rather
// than by loading the profile (which held about 13 times the upload): executables and instruction
// traces one at a time, trace.json streamed from the file (docs/security.md). Returns the manifest's
// trace.json path. Throws sightline::Error as the readers do.
std::string validate_for_analysis(const fs::path& staging) {
  std::string index_trace = "trace.json";
  const formats::Manifest manifest = formats::manifest_load(staging.string());
  std::set<uint64_t> executables;
  for (const formats::ManifestFile& file : manifest.files) {
    const std::string path = (staging / file.path).string();
    SIGHTLINE_CHECK(fs::exists(path), "'{}' is listed in {}/manifest.json but missing; the directory is "
                    "incomplete, copy the whole profile directory again", path, staging.string());
    if (file.kind == formats::ManifestFileKind::neff) executables.insert(formats::neff_hash(formats::neff_load(path)));
  }
  for (const formats::ManifestFile& file : manifest.files) {
    if (file.kind != formats::ManifestFileKind::ntff) continue;
    const uint64_t paired = formats::ntff_load((staging / file.path).string()).neff_hash;
    SIGHTLINE_CHECK(executables.contains(paired), "'{}/{}' pairs with {}, which the directory lacks; copy the "
                    "NEFF next to it", staging.string(), file.path, formats::ntff_paired_neff_file_name(paired));
  }
  for (const formats::ManifestFile& file : manifest.files) {
    if (file.kind != formats::ManifestFileKind::trace) continue;
    analysis::trace_json_validate_file((staging / file.path).string(), (staging / file.path).string());
    index_trace = file.path;
  }
  return index_trace;
}

// Runs `step`; a reader's refusal (anything but a RequestError, which already says what is wrong)
// becomes refuse_upload's message.
template <class Step>
auto as_upload_check(std::string_view name, const fs::path& staging, Step&& step) {
  try {
    return step();
  } catch (const RequestError&) {
    throw;
  } catch (const std::exception& failure) {
    refuse_upload(name, staging, failure);
  }
}

}  // namespace

json ProfileStore::finish_upload(std::unique_ptr<UploadStaging> staged, const UploadOptions& options) {
  SIGHTLINE_CHECK(staged != nullptr, "finish_upload needs the staging begin_upload returned");
  staged->on_disk([&] { staged->staging_.end_file(); });
  const std::string_view name = staged->name_;
  const fs::path& staging = staged->staging_.path();
  const UploadContents contents = upload_contents(staged->files_);
  // Make it a profile directory (a pair gets its trace.json and manifest), then every reader's checks:
  // the writer's own (what commit checks), the analysis readers', then the index's.
  as_upload_check(name, staging, [&] {
    if (contents.whole_directory) {
      check_manifest_files(name, staging, contents.by_name);
    } else {
      build_pair_profile(name, staging, contents.by_kind.at(UploadKind::neff).front(),
                         contents.by_kind.at(UploadKind::ntff).front(), options);
    }
    staged->staging_.validate();
  });
  const std::string index_trace = as_upload_check(name, staging, [&] {
    try {
      return validate_for_analysis(staging);
    } catch (const RequestError& failure) {
      refuse_upload(name, staging, failure);  // a reader's refusal, even when it is a RequestError
    }
  });
  try {
    validate_trace_file(staging / index_trace, (staging.filename() / index_trace).string());
  } catch (const RequestError& failure) {
    throw RequestError(400, fmt::format("upload '{}' is not a valid profile: {}", name,
                                        without_path(failure.what(), staging.filename().string(), std::string(name))));
  }
  std::lock_guard lock(mutex_);
  // Fsynced and renamed by the one writer; RENAME_NOREPLACE refuses a profile that appeared meanwhile.
  bool placed = false;
  staged->on_disk([&] { placed = staged->staging_.commit_new(); });
  if (!placed) {
    throw RequestError(409, fmt::format("a profile named '{}' already exists; delete it first or choose another name",
                                        name));
  }
  forget(name);
  return {{"uploaded", std::string(name)}, {"files", contents.by_name.size()}, {"bytes", staged->bytes_}};
}

}  // namespace sightline::server
