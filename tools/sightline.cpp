// sightline: read a profile output directory from the command line.
//
//   sightline view profiles/fused --output-format summary-text
//   sightline table profiles/fused --sort-by self_neuron_time_total --row-limit 10
//   sightline table profiles/fused --format csv          # or json: the same rows as data (docs/formats.md)
//   sightline table profiles/naive --group-by-stack-n 1  # rows by call site (profiled with with_stack)
//   sightline view profiles/naive --output-format perfetto -o naive.perfetto.json   # for ui.perfetto.dev
//   sightline compare profiles/naive profiles/fused
//   sightline merge rank0/eager rank1/eager -o merged   # one timeline of every rank, collectives lined up
//   sightline roofline profiles/fused -o roofline.svg
//   sightline export profiles/naive --format sqlite naive.db             # schema: docs/formats.md
//   sightline query profiles/naive "select name, count(*) from ops group by name"
//   sightline check profiles/naive --baseline tests/baselines/rmsnorm_naive.json --max-regress device_busy=2%
//   sightline check profiles/naive --write-baseline tests/baselines/rmsnorm_naive.json
//   sightline neff dump profiles/fused/neff_0123456789abcdef.neff
//   sightline ntff dump profiles/fused/0123456789abcdef_instid_0_vnc_0.ntff
//   sightline serve profiles --port 8600                  # the Explorer over a directory of profiles
//   sightline upload profiles/fused --name fused --server 'http://127.0.0.1:8600/?token=...'  # what serve printed
//
// Exit codes (docs/analysis.md), diff's convention: 0 success (check: no regression), 1 check found a
// regression, 2 bad input or usage (unknown command or option, missing argument, missing or incomplete
// profile directory, corrupt NEFF/NTFF, malformed JSON, SQL that SQLite refuses, unwritable output, an
// upload the server refused or no server to upload to, a port in use), 3 internal error. So a CI script can tell "slower" (1)
// from "could not check" (2).
#include <pthread.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "analysis/check.h"
#include "analysis/compare.h"
#include "analysis/merge.h"
#include "analysis/perfetto.h"
#include "analysis/profile_dir.h"
#include "analysis/report.h"
#include "analysis/roofline.h"
#include "analysis/sqlite.h"
#include "analysis/trace_json.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "sightline/profiler/key_averages.h"
#include "progress.h"
#include "server/http_server.h"
#include "server/upload_client.h"
#include "sightline/error.h"

namespace {

using namespace sightline;
namespace fs = std::filesystem;

constexpr int kExitRegression = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBadInput = 2;
constexpr int kExitInternal = 3;

analysis::ProfileDir load(const std::string& dir, bool with_trace = true) {
  tools::ProgressBar bar(fmt::format("reading {}", dir));
  return analysis::profile_dir_load(dir, {.load_trace_json = with_trace, .progress = bar.callback()});
}

int view(const std::string& dir, const std::string& format, const std::string& output) {
  // The summaries read only the captured executions (analysis/insights.h); json adds key_averages.
  const analysis::ProfileDir profile = load(dir, format == "json" || format == "perfetto");
  if (format == "perfetto") {
    if (output.empty()) {
      analysis::perfetto_json_write(profile, std::cout);
    } else {
      analysis::perfetto_json_save(profile, output);
      fmt::print("wrote {} (open it in https://ui.perfetto.dev)\n", output);
    }
    return 0;
  }
  if (format == "summary-text") std::cout << analysis::report_summary_text(profile);
  if (format == "summary-json") std::cout << analysis::report_summary_json(profile);
  if (format == "json") std::cout << analysis::report_json(profile);
  return 0;
}

int table(const std::string& dir, const std::string& sort_by, int64_t row_limit, bool by_shape,
          int64_t by_stack_n, const std::string& format) {
  SIGHTLINE_CHECK(fs::is_directory(dir), "profile directory '{}' does not exist; pass a profile output directory",
                  dir);
  const std::string trace_path = (fs::path(dir) / "trace.json").string();
  SIGHTLINE_CHECK(fs::exists(trace_path), "'{}' has no trace.json; profile with the CPU activity to get the "
                  "framework trace", dir);
  tools::ProgressBar bar(fmt::format("reading {}", trace_path));
  // Streamed from the file: memory is the trace's events, not a document of the whole file.
  const profiler::CollectedTrace trace = analysis::trace_json_load(trace_path, bar.callback());
  bar.finish();
  // A trace carries FLOPs only when it was recorded with with_flops, which is also what adds the column.
  bool with_flops = false;
  for (const profiler::FunctionEvent& e : trace.events) with_flops = with_flops || e.flops != 0;
  const auto averages = profiler::key_averages(
      trace, {.group_by_input_shape = by_shape, .device_name = analysis::trace_json_file_device_name(trace_path),
              .with_flops = with_flops, .group_by_stack_n = by_stack_n});
  profiler::TableOptions options;
  options.sort_by = sort_by;
  options.row_limit = row_limit;
  if (format == "csv") {
    std::cout << averages.to_csv(options);
  } else if (format == "json") {
    std::cout << averages.to_json(options);
  } else {
    std::cout << averages.table(options);
  }
  return 0;
}

int compare(const std::string& a, const std::string& b, const std::string& format) {
  const analysis::Comparison diff = analysis::compare(load(a), load(b));
  std::cout << (format == "json" ? analysis::compare_json(diff) : analysis::compare_text(diff));
  return 0;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  SIGHTLINE_CHECK(out.good(), "cannot write '{}'; check that its directory exists and is writable", path);
}

// A profile directory (read with the progress bar) or a baseline file.
analysis::GateMetrics gate_metrics(const std::string& path) {
  if (fs::is_directory(path)) return analysis::gate_metrics(load(path));
  return analysis::gate_metrics_load(path);
}

struct CheckOptions {
  std::string profile, baseline, write_baseline, thresholds_file, junit, markdown;
  std::vector<std::string> max_regress;
};

int check(const CheckOptions& o) {
  analysis::Thresholds thresholds;
  if (!o.thresholds_file.empty()) {
    std::ifstream in(o.thresholds_file, std::ios::binary);
    SIGHTLINE_CHECK(in.good(), "cannot read the thresholds file '{}'; check the path", o.thresholds_file);
    std::ostringstream text;
    text << in.rdbuf();
    analysis::thresholds_parse_json(thresholds, text.str(), o.thresholds_file);
  }
  for (const std::string& assignment : o.max_regress) analysis::thresholds_add(thresholds, assignment);
  const analysis::GateMetrics current = gate_metrics(o.profile);
  if (!o.write_baseline.empty()) {
    write_text_file(o.write_baseline, analysis::gate_metrics_json(current));
    fmt::print("wrote the baseline of {} to {}: {} totals, {} ops\n", o.profile, o.write_baseline,
               current.totals.size(), current.ops.size());
    if (o.baseline.empty()) return 0;
  }
  const analysis::CheckResult result = analysis::check(gate_metrics(o.baseline), current, thresholds);
  std::cout << analysis::check_text(result);
  if (!o.junit.empty()) write_text_file(o.junit, analysis::check_junit(result));
  if (!o.markdown.empty()) write_text_file(o.markdown, analysis::check_markdown(result));
  return result.regressed() ? kExitRegression : 0;
}

int export_profile(const std::string& dir, const std::string& output) {
  analysis::sqlite_export(load(dir), output);
  fmt::print("wrote {}\n", output);
  return 0;
}

int query(const std::string& dir, const std::string& sql, const std::string& format) {
  // A database file is queried as it is; a profile directory through its cached database.
  const std::string db = fs::is_directory(dir) ? analysis::sqlite_cached(dir) : dir;
  const analysis::QueryResult result = analysis::sqlite_query(db, sql);
  if (format == "csv") {
    std::cout << analysis::query_csv(result);
  } else if (format == "json") {
    std::cout << analysis::query_json(result);
  } else {
    std::cout << analysis::query_text(result);
  }
  return 0;
}

int roofline(const std::string& dir, const std::string& output) {
  const analysis::Roofline roof = analysis::roofline(load(dir, false));
  analysis::roofline_svg_save(roof, output);
  for (const analysis::RooflinePoint& p : roof.ops) {
    fmt::print("{}: {:.3f} FLOP/B ({} ridge {:.1f}), {:.3f} GFLOP/s of {:.3f} attainable ({:.1f}%), {}\n", p.name,
               p.intensity, p.intensity < roof.ridge_point ? "below" : "above", roof.ridge_point,
               p.achieved_flops_per_s / 1e9, p.attainable_flops_per_s / 1e9, 100 * p.efficiency,
               analysis::bound_name(p.bound));
  }
  fmt::print("wrote {}\n", output);
  return 0;
}

int ntff_dump(const std::string& path, const std::string& neff_path) {
  const formats::NtffTrace trace = formats::ntff_load(path);
  std::string paired = neff_path;
  if (paired.empty()) {
    const fs::path next_to = fs::path(path).parent_path() / formats::ntff_paired_neff_file_name(trace.neff_hash);
    if (fs::exists(next_to)) paired = next_to.string();
  }
  if (paired.empty()) {
    std::cout << formats::ntff_dump(trace);
  } else {
    const device::Executable exe = formats::neff_load(paired);
    std::cout << formats::ntff_dump(trace, &exe);
  }
  return 0;
}

constexpr int kDefaultPort = 8600;

// The built Explorer UI: $SIGHTLINE_EXPLORER_DIST; else an install's share/sightline/explorer, found
// from this binary's own location; else (a build tree) the source tree's explorer/dist.
std::string default_ui_dir() {
  if (const char* from_environment = std::getenv("SIGHTLINE_EXPLORER_DIST")) return from_environment;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path installed = self.parent_path().parent_path() / "share" / "sightline" / "explorer";
    if (std::filesystem::exists(installed / "index.html", error)) return installed.string();
  }
  return SIGHTLINE_EXPLORER_DIST;
}

int serve(const server::ServerOptions& options) {
  // SIGINT/SIGTERM are taken by a watcher thread that stops the server cleanly; blocked before the
  // server starts its threads, so they all inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<server::ExplorerServer> created;
  try {
    created = std::make_unique<server::ExplorerServer>(options);
  } catch (const server::RequestError& error) {
    fail("{}; pass a directory of profile output directories", error.what());
  }
  server::ExplorerServer& explorer = *created;
  explorer.bind();
  if (!fs::is_directory(options.static_dir)) {
    fmt::print(stderr, "sightline serve: no built UI at '{}' (run scripts/explorer.sh); serving the API only\n",
               options.static_dir.string());
  }
  if (!server::is_loopback_host(options.host)) {
    fmt::print(stderr,
               "sightline serve: warning: listening on {}, which other machines may reach: anyone who can open "
               "the URL below (it holds the token) can read, upload and delete profiles. Clients must name the "
               "server as 127.0.0.1, localhost{} or a name given with --allow-host.\n",
               options.host,
               options.host == "0.0.0.0" || options.host == "::" ? "" : fmt::format(", {}", options.host));
  } else if (!options.require_token) {
    fmt::print(stderr, "sightline serve: warning: --no-token: any program on this machine can upload and delete "
                       "profiles\n");
  }
  fmt::print("sightline Explorer: {} serving profiles from {}\n", explorer.url(),
             fs::absolute(options.profile_root).lexically_normal().string());
  std::fflush(stdout);
  std::thread watcher([&explorer, stop_signals] {
    int received = 0;
    sigwait(&stop_signals, &received);
    explorer.stop();
  });
  explorer.serve();
  // serve() also returns when listening fails; wake the watcher so the process can exit.
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  return 0;
}

int upload(const std::string& dir, const std::string& name, const std::string& server_url, const std::string& token) {
  const std::vector<server::UploadFile> files = server::upload_files_from_directory(dir);
  const nlohmann::json stored = server::upload_to_server(server_url, name, files, token);
  fmt::print("uploaded {} as '{}': {} files, {} bytes\n", dir, stored.value("uploaded", name),
             stored.value("files", uint64_t{0}), stored.value("bytes", uint64_t{0}));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sightline: summaries, tables, rooflines and comparisons of profile output directories, and the\n"
               "Explorer server.\n"
               "Exit codes: 0 ok, 1 check found a regression, 2 bad input or usage error, 3 internal error."};
  app.require_subcommand(1);
  int status = 0;

  std::string dir, format = "summary-text";
  auto* view_cmd = app.add_subcommand("view", "Summary metrics, roofline and insights of a profile directory");
  view_cmd->add_option("dir", dir, "profile output directory (holds manifest.json)")->required();
  std::string view_output;
  view_cmd->add_option("--output-format", format, "summary-text, summary-json, json, or perfetto (a Chrome JSON "
                       "trace laid out for the Perfetto UI: lanes, flows, one track per engine and DMA queue)")
      ->check(CLI::IsMember({"summary-text", "summary-json", "json", "perfetto"}));
  view_cmd->add_option("-o,--output", view_output, "file to write (perfetto; default: stdout)");
  view_cmd->callback([&] { status = view(dir, format, view_output); });

  std::string sort_by;
  int64_t row_limit = 100;
  bool by_shape = false;
  int64_t by_stack_n = 0;
  auto* table_cmd = app.add_subcommand("table", "The key_averages table of a saved profile, as the live one");
  table_cmd->add_option("dir", dir, "profile output directory")->required();
  table_cmd->add_option("--sort-by", sort_by, "sort key, e.g. self_neuron_time_total, cpu_time_total, count");
  table_cmd->add_option("--row-limit", row_limit, "rows to print; negative for all")->capture_default_str();
  table_cmd->add_flag("--group-by-input-shape", by_shape, "one row per (op, input shapes)");
  table_cmd->add_option("--group-by-stack-n", by_stack_n,
                        "one row per (op, first N frames of its call stack): profiles recorded with with_stack")
      ->check(CLI::NonNegativeNumber);
  std::string table_format = "text";
  table_cmd->add_option("--format", table_format, "text (torch's table), csv (RFC 4180) or json; csv and json "
                        "have torch's column names and times in integer ns (docs/formats.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "csv", "json"}));
  table_cmd->callback([&] { status = table(dir, sort_by, row_limit, by_shape, by_stack_n, table_format); });

  std::vector<std::string> rank_dirs;
  std::string merge_output;
  auto* merge_cmd = app.add_subcommand(
      "merge", "One profile from the profiles of several ranks: clocks aligned on their collectives, every rank's "
               "lanes on one timeline, and the per-rank and cross-rank collective summary");
  merge_cmd->add_option("dirs", rank_dirs, "the ranks' profile directories (each recorded its rank)")->required();
  merge_cmd->add_option("-o,--output", merge_output, "the merged profile directory to write")->required();
  merge_cmd->callback([&] {
    std::cout << analysis::merge_report_text(analysis::merge_profiles(rank_dirs, merge_output));
  });

  std::string dir_a, dir_b, compare_format = "text";
  auto* compare_cmd = app.add_subcommand("compare", "Ranked per-executable, per-op and per-engine deltas, A -> B");
  compare_cmd->add_option("a", dir_a, "baseline profile directory")->required();
  compare_cmd->add_option("b", dir_b, "profile directory to compare with the baseline")->required();
  compare_cmd->add_option("--output-format", compare_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  compare_cmd->callback([&] { status = compare(dir_a, dir_b, compare_format); });

  CheckOptions check_options;
  auto* check_cmd = app.add_subcommand(
      "check", "Gate a profile against a baseline: exit 1 when a metric grew past its threshold (docs/ci-gate.md)");
  check_cmd->add_option("profile", check_options.profile, "profile output directory to check (or a baseline file)")
      ->required();
  check_cmd->add_option("--baseline", check_options.baseline,
                        "profile directory or baseline file (--write-baseline) to compare with");
  check_cmd->add_option("--write-baseline", check_options.write_baseline,
                        "write PROFILE's metrics to this file (the small JSON a repository commits)");
  check_cmd->add_option("--max-regress", check_options.max_regress,
                        "METRIC=AMOUNT, repeatable: how much a metric may grow, e.g. device_busy=2%, span=1us, "
                        "op:aten::mul=100ns, op:*=1%, hbm_bytes=4KiB, executions=0 (default 0 for all)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  check_cmd->add_option("--thresholds", check_options.thresholds_file,
                        "JSON file of metric: amount, e.g. {\"device_busy\": \"2%\"}; --max-regress overrides it");
  check_cmd->add_option("--junit", check_options.junit, "also write a JUnit XML report (one testcase per metric)");
  check_cmd->add_option("--markdown", check_options.markdown, "also write a Markdown table (for a PR comment)");
  check_cmd->callback([&] {
    if (check_options.baseline.empty() && check_options.write_baseline.empty()) {
      throw CLI::ValidationError("check", "give --baseline BASELINE to check against, or --write-baseline FILE");
    }
    status = check(check_options);
  });

  std::string export_format, export_output;
  auto* export_cmd = app.add_subcommand("export", "Write a profile directory as an SQLite database (docs/formats.md)");
  export_cmd->add_option("dir", dir, "profile output directory")->required();
  export_cmd->add_option("output", export_output, "database file to write, e.g. profile.db")->required();
  export_cmd->add_option("--format", export_format, "sqlite")->required()->check(CLI::IsMember({"sqlite"}));
  export_cmd->callback([&] { status = export_profile(dir, export_output); });

  std::string sql, query_format = "text";
  auto* query_cmd = app.add_subcommand(
      "query", "Run SQL on a profile (its database is built on first use, cached as DIR/profile.sqlite)");
  query_cmd->add_option("dir", dir, "profile output directory, or a database `export` wrote")->required();
  query_cmd->add_option("sql", sql, "the query, e.g. \"select name, count(*) from ops group by name\"")->required();
  query_cmd->add_option("--format", query_format, "text (aligned columns), csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "csv", "json"}));
  query_cmd->callback([&] { status = query(dir, sql, query_format); });

  std::string output = "roofline.svg";
  auto* roofline_cmd = app.add_subcommand("roofline", "Draw the roofline of a profile as SVG");
  roofline_cmd->add_option("dir", dir, "profile output directory")->required();
  roofline_cmd->add_option("-o,--output", output, "SVG file to write")->capture_default_str();
  roofline_cmd->callback([&] { status = roofline(dir, output); });

  std::string file, neff_for_ntff;
  auto* neff_cmd = app.add_subcommand("neff", "Executable (NEFF) files");
  neff_cmd->require_subcommand(1);
  auto* neff_dump_cmd = neff_cmd->add_subcommand("dump", "List an executable's tensors, source ops and instructions");
  neff_dump_cmd->add_option("file", file, "neff_<hash>.neff")->required();
  neff_dump_cmd->callback([&] { std::cout << formats::neff_dump(formats::neff_load(file)); });
  auto* ntff_cmd = app.add_subcommand("ntff", "Instruction-trace (NTFF) files");
  ntff_cmd->require_subcommand(1);
  auto* ntff_dump_cmd = ntff_cmd->add_subcommand("dump", "List every execution and instruction record of a trace");
  ntff_dump_cmd->add_option("file", file, "<hash>_instid_0_vnc_<core>.ntff")->required();
  ntff_dump_cmd->add_option("--neff", neff_for_ntff, "the paired executable (default: found next to the trace)");
  ntff_dump_cmd->callback([&] { status = ntff_dump(file, neff_for_ntff); });

  server::ServerOptions serve_options;
  serve_options.profile_root = ".";
  serve_options.port = kDefaultPort;
  serve_options.static_dir = default_ui_dir();
  std::string serve_root = ".", serve_ui = serve_options.static_dir.string();
  uint64_t max_upload_mb = serve_options.max_upload_bytes >> 20;
  uint64_t request_timeout_s = static_cast<uint64_t>(serve_options.request_timeout.count() / 1000);
  auto* serve_cmd = app.add_subcommand("serve", "The Explorer (browser UI and JSON API) over a directory of profiles");
  serve_cmd->add_option("dir", serve_root, "directory holding one profile output directory per subdirectory")
      ->capture_default_str();
  serve_cmd->add_option("--port", serve_options.port, "port to listen on; 0 picks a free one")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  serve_cmd->add_option("--host", serve_options.host, "address to bind; keep 127.0.0.1 unless others must reach it")
      ->capture_default_str();
  serve_cmd->add_option("--token", serve_options.token,
                        "the write token (default: a random one per run, printed in the URL)");
  bool no_token = false;
  serve_cmd->add_flag("--no-token", no_token, "uploads and deletes need no token (loopback --host only)");
  serve_cmd->add_option("--allow-host", serve_options.allowed_hosts,
                        "another name clients may reach the server by (repeatable; for --host 0.0.0.0)");
  serve_cmd->add_option("--ui", serve_ui, "the built Explorer UI (default: $SIGHTLINE_EXPLORER_DIST, else "
                        "../share/sightline/explorer beside this binary, else the source tree's explorer/dist)");
  serve_cmd->add_option("--max-upload-mb", max_upload_mb, "largest upload accepted, in MiB")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  serve_cmd->add_option("--request-timeout", request_timeout_s,
                        "longest one request may take to arrive and be answered, in seconds (uploads included; "
                        "docs/security.md)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{10}, uint64_t{86400}));
  serve_cmd->callback([&] {
    serve_options.request_timeout = std::chrono::seconds(request_timeout_s);
    serve_options.profile_root = serve_root;
    serve_options.static_dir = serve_ui;
    serve_options.max_upload_bytes = max_upload_mb << 20;
    serve_options.require_token = !no_token;
    status = serve(serve_options);
  });

  std::string upload_name, server_url = fmt::format("http://127.0.0.1:{}", kDefaultPort);
  auto* upload_cmd = app.add_subcommand(
      "upload", "Store a profile directory (or a NEFF + NTFF pair) in a running Explorer server");
  upload_cmd->add_option("dir", dir, "profile output directory, or a directory with one .neff and its .ntff")
      ->required();
  upload_cmd->add_option("--name", upload_name, "name of the new profile on the server")->required();
  upload_cmd->add_option("--server", server_url, "the server's address, or the URL `sightline serve` printed "
                         "(with its ?token=)")->capture_default_str();
  std::string upload_token;
  upload_cmd->add_option("--token", upload_token, "the server's write token (default: the one in --server)");
  upload_cmd->callback([&] { status = upload(dir, upload_name, server_url, upload_token); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  } catch (const sightline::Error& e) {
    fmt::print(stderr, "sightline: error: {}\n", e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "sightline: internal error: {}\n", e.what());
    return kExitInternal;
  }
  return status;
}
