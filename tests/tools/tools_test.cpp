// The sightline CLI, run as a subprocess on profiles generated in the test: outputs, exit codes and
// the errors a user sees for malformed inputs.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../analysis/profiles.h"

namespace fs = std::filesystem;

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `sightline <args>` with stdout and stderr captured to files.
CliRun run_cli(const std::string& args) {
  const fs::path root = test_profiles::generate().root;
  const fs::path out = root / "cli.out", err = root / "cli.err";
  const std::string command = fmt::format("'{}' {} >'{}' 2>'{}'", SIGHTLINE_CLI, args, out.string(), err.string());
  const int status = std::system(command.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

std::string shell_quoted(const fs::path& path) { return "'" + path.string() + "'"; }

}  // namespace

TEST(SightlineCli, ViewSummaryTextReportsTheFusedRmsNormMemoryBound) {
  const CliRun r = run_cli("view " + shell_quoted(test_profiles::generate().fused.dir) + " --output-format summary-text");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mbu_estimated_percent"), std::string::npos) << r.out;
  const size_t bound_line = r.out.find("\nbound ");
  ASSERT_NE(bound_line, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(bound_line, r.out.find('\n', bound_line + 1) - bound_line).find("memory-bound") !=
                std::string::npos,
            true)
      << r.out;
}

TEST(SightlineCli, ViewJsonFormatsParse) {
  for (const char* format : {"summary-json", "json"}) {
    const CliRun r = run_cli("view " + shell_quoted(test_profiles::generate().matmul.dir) + " --output-format " + format);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json doc = nlohmann::json::parse(r.out);  // strict
    const nlohmann::json& summary = std::string(format) == "json" ? doc["summary"] : doc;
    EXPECT_TRUE(summary.contains("mfu_estimated_percent")) << r.out;
  }
}

TEST(SightlineCli, TableOfASavedProfileIsTheLiveTable) {
  const auto& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused}) {
    const CliRun r = run_cli(fmt::format("table {} --sort-by {} --row-limit -1", shell_quoted(p->dir), test_profiles::kSortBy));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, p->live_table);
  }
}

TEST(SightlineCli, CompareRanksTheRemovedExecutablesFirst) {
  const auto& g = test_profiles::generate();
  const CliRun r = run_cli("compare " + shell_quoted(g.naive.dir) + " " + shell_quoted(g.fused.dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string first_row = r.out.substr(r.out.find("\n   1  ") + 1, 80);
  EXPECT_NE(first_row.find("executable"), std::string::npos) << r.out;
  EXPECT_NE(first_row.find("removed"), std::string::npos) << r.out;
}

TEST(SightlineCli, RooflineWritesAnSvg) {
  const fs::path svg = test_profiles::generate().root / "roofline.svg";
  const CliRun r = run_cli("roofline " + shell_quoted(test_profiles::generate().matmul.dir) + " -o " + shell_quoted(svg));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("aten::matmul"), std::string::npos) << r.out;
  const std::string text = slurp(svg);
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("compute roof"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

TEST(SightlineCli, DumpsNeffAndNtffFiles) {
  const fs::path dir = test_profiles::generate().fused.dir;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".neff")) {
      const CliRun r = run_cli("neff dump " + shell_quoted(entry.path()));
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_FALSE(r.out.empty());
    }
    if (name.ends_with(".ntff")) {
      const CliRun r = run_cli("ntff dump " + shell_quoted(entry.path()));
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_FALSE(r.out.empty());
    }
  }
}

TEST(SightlineCli, HelpAndUsageErrors) {
  EXPECT_EQ(run_cli("--help").exit_code, 0);
  EXPECT_EQ(run_cli("view --help").exit_code, 0);
  EXPECT_EQ(run_cli("").exit_code, 1);
  EXPECT_EQ(run_cli("frobnicate").exit_code, 1);
  EXPECT_EQ(run_cli("view " + shell_quoted(test_profiles::generate().fused.dir) + " --output-format xml").exit_code, 1);
}

TEST(SightlineCli, MalformedInputsAreClearErrorsWithExitCode2) {
  const auto& g = test_profiles::generate();
  const fs::path bad = g.root / "malformed";
  fs::create_directories(bad);
  {
    const CliRun r = run_cli("view " + shell_quoted(bad / "missing"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  }
  {  // An export that did not finish: no manifest.
    const fs::path incomplete = bad / "incomplete";
    fs::create_directories(incomplete);
    fs::copy_file(fs::path(g.fused.dir) / "trace.json", incomplete / "trace.json");
    const CliRun r = run_cli("view " + shell_quoted(incomplete));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("has no manifest.json"), std::string::npos) << r.err;
  }
  {  // A corrupt NEFF inside an otherwise complete directory, and on its own.
    const fs::path corrupt = bad / "corrupt";
    fs::copy(g.fused.dir, corrupt, fs::copy_options::recursive);
    for (const auto& entry : fs::directory_iterator(corrupt)) {
      if (entry.path().extension() != ".neff") continue;
      std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(40);
      f.put('\x7f');
      f.close();
      const CliRun alone = run_cli("neff dump " + shell_quoted(entry.path()));
      EXPECT_EQ(alone.exit_code, 2);
      EXPECT_NE(alone.err.find(entry.path().filename().string()), std::string::npos) << alone.err;
    }
    const CliRun r = run_cli("view " + shell_quoted(corrupt));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(".neff"), std::string::npos) << r.err;
  }
  {  // A truncated NTFF.
    const fs::path truncated = bad / "truncated";
    fs::copy(g.fused.dir, truncated, fs::copy_options::recursive);
    for (const auto& entry : fs::directory_iterator(truncated)) {
      if (entry.path().extension() == ".ntff") fs::resize_file(entry.path(), 100);
    }
    const CliRun r = run_cli("view " + shell_quoted(truncated));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(".ntff"), std::string::npos) << r.err;
  }
  {  // Bad JSON in trace.json.
    const fs::path broken = bad / "broken_json";
    fs::copy(g.fused.dir, broken, fs::copy_options::recursive);
    std::ofstream(broken / "trace.json") << "{\"traceEvents\": [ {\"ph\": ";
    const CliRun r = run_cli("table " + shell_quoted(broken));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("is not valid JSON"), std::string::npos) << r.err;
  }
}
