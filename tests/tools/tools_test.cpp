// The sightline CLI, run as a subprocess on profiles generated in the test: outputs, exit codes and
// the errors a user sees for malformed inputs.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../analysis/profiles.h"
#include "formats/ntff.h"

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

std::string shell_quoted(const fs::path& path) { return fmt::format("'{}'", path.string()); }

// docs/analysis.md: 1 is kept for `check` finding a regression, so a usage error is 2, like bad input.
constexpr int kExitRegression = 1;
constexpr int kExitUsage = 2;

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

TEST(SightlineCli, ViewPerfettoWritesATraceThatParses) {
  const fs::path out = test_profiles::generate().root / "naive.perfetto.json";
  const CliRun r = run_cli("view " + shell_quoted(test_profiles::generate().naive.dir) +
                           " --output-format perfetto -o " + shell_quoted(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ui.perfetto.dev"), std::string::npos) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));  // strict
  EXPECT_GT(doc["traceEvents"].size(), 100u);
}

TEST(SightlineCli, TableOfASavedProfileIsTheLiveTable) {
  const auto& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused}) {
    const CliRun r = run_cli(fmt::format("table {} --sort-by {} --row-limit -1", shell_quoted(p->dir), test_profiles::kSortBy));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, p->live_table);
  }
}

TEST(SightlineCli, TableAsCsvAndJsonIsWhatTheLibraryPrints) {
  const auto& g = test_profiles::generate();
  for (const test_profiles::Profiled* p : {&g.naive, &g.fused}) {
    const std::string args = fmt::format("table {} --sort-by {} --row-limit -1", shell_quoted(p->dir), test_profiles::kSortBy);
    const CliRun csv = run_cli(args + " --format csv");
    ASSERT_EQ(csv.exit_code, 0) << csv.err;
    EXPECT_EQ(csv.out, p->live_csv);
    const CliRun json = run_cli(args + " --format json");
    ASSERT_EQ(json.exit_code, 0) << json.err;
    EXPECT_EQ(json.out, p->live_json);
    EXPECT_EQ(run_cli(args + " --format text").out, p->live_table);
  }
}

TEST(SightlineCli, TableUnknownFormatIsAUsageErrorNamingTheChoices) {
  const CliRun r = run_cli("table " + shell_quoted(test_profiles::generate().fused.dir) + " --format xml");
  EXPECT_EQ(r.exit_code, kExitUsage);
  EXPECT_NE(r.err.find("--format"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("xml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("csv"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
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
  EXPECT_EQ(run_cli("").exit_code, kExitUsage);
  EXPECT_EQ(run_cli("frobnicate").exit_code, kExitUsage);
  EXPECT_EQ(run_cli("view " + shell_quoted(test_profiles::generate().fused.dir) + " --output-format xml").exit_code,
            kExitUsage);
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

TEST(SightlineCli, CheckPassesOnTheSameProgramAndWritesItsBaseline) {
  const auto& g = test_profiles::generate();
  const fs::path dir = g.root / "check_same";
  fs::create_directories(dir);
  const fs::path baseline = dir / "naive.json";
  const CliRun write = run_cli(fmt::format("check {} --write-baseline {}", shell_quoted(g.naive.dir), shell_quoted(baseline)));
  ASSERT_EQ(write.exit_code, 0) << write.err;
  EXPECT_NE(slurp(baseline).find("\"sightline_baseline\": 1"), std::string::npos);
  for (const fs::path& against : {baseline, fs::path(g.naive.dir)}) {
    const CliRun r = run_cli(fmt::format("check {} --baseline {} --junit {} --markdown {}", shell_quoted(g.naive.dir),
                                         shell_quoted(against), shell_quoted(dir / "junit.xml"),
                                         shell_quoted(dir / "check.md")));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.rfind("sightline check: pass", 0), 0u) << r.out;
    EXPECT_NE(slurp(dir / "junit.xml").find("failures=\"0\""), std::string::npos);
    EXPECT_NE(slurp(dir / "check.md").find("| status | metric |"), std::string::npos);
  }
}

TEST(SightlineCli, CheckFailsWithExit1NamingTheSlowerOp) {
  const auto& g = test_profiles::generate();
  const fs::path dir = g.root / "check_slower";
  fs::create_directories(dir);
  const CliRun r = run_cli(fmt::format("check {} --baseline {} --junit {}", shell_quoted(g.slower.dir),
                                       shell_quoted(g.naive.dir), shell_quoted(dir / "junit.xml")));
  EXPECT_EQ(r.exit_code, kExitRegression) << r.out << r.err;
  EXPECT_EQ(r.out.rfind("sightline check: FAIL", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("op:aten::mul grew by +"), std::string::npos) << r.out;
  EXPECT_NE(slurp(dir / "junit.xml").find("<testcase classname=\"sightline.check.op\" name=\"aten::mul\" time=\"0\">\n"
                                          "      <failure"), std::string::npos);
  // Thresholds from flags and from a file let it pass.
  std::ofstream(dir / "thresholds.json") << R"({"*": "50%"})";
  const CliRun loose = run_cli(fmt::format("check {} --baseline {} --thresholds {} --max-regress executions=1",
                                           shell_quoted(g.slower.dir), shell_quoted(g.naive.dir),
                                           shell_quoted(dir / "thresholds.json")));
  EXPECT_EQ(loose.exit_code, 0) << loose.out << loose.err;
}

TEST(SightlineCli, CheckBadInputIsExit2WithAClearMessage) {
  const auto& g = test_profiles::generate();
  const fs::path dir = g.root / "check_bad";
  fs::create_directories(dir);
  std::ofstream(dir / "not_a_baseline.json") << R"({"hello": 1})";
  const std::string naive = shell_quoted(g.naive.dir);
  const struct {
    std::string args, message;
  } cases[] = {
      {"check " + naive, "--baseline"},
      {"check " + naive + " --baseline " + shell_quoted(dir / "missing.json"), "does not exist"},
      {"check " + naive + " --baseline " + shell_quoted(dir / "not_a_baseline.json"), "not a sightline baseline"},
      {"check " + naive + " --baseline " + naive + " --max-regress busy=2%", "unknown metric 'busy'"},
      {"check " + naive + " --baseline " + naive + " --max-regress span=2KiB", "not a unit of span"},
      {"check " + naive + " --baseline " + naive + " --thresholds " + shell_quoted(dir / "missing.json"), "cannot read"},
      {"check " + naive + " --baseline " + naive + " --junit " + shell_quoted(dir / "no_dir" / "j.xml"), "cannot write"},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(SightlineCli, ExportAndQueryASavedProfileWithSql) {
  const auto& g = test_profiles::generate();
  const fs::path dir = g.root / "sql";
  fs::remove_all(dir);
  fs::copy(g.naive.dir, dir, fs::copy_options::recursive);
  const std::string calls = "select name, count(*) from ops where kind = 'cpu_op' group by name order by name";
  const CliRun r = run_cli(fmt::format("query {} \"{}\"", shell_quoted(dir), calls));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("name         count(*)\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("aten::mul           3\n"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "profile.sqlite")) << "the database is cached beside the profile";
  const CliRun csv = run_cli(fmt::format("query {} \"{}\" --format csv", shell_quoted(dir), calls));
  EXPECT_NE(csv.out.find("aten::mul,3\r\n"), std::string::npos) << csv.out;
  const fs::path db = g.root / "sql_export.db";
  const CliRun exported = run_cli(fmt::format("export {} --format sqlite {}", shell_quoted(g.naive.dir), shell_quoted(db)));
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const CliRun from_file = run_cli(fmt::format("query {} \"select count(*) from executions\" --format json",
                                               shell_quoted(db)));
  EXPECT_EQ(from_file.out, "{\"columns\":[\"count(*)\"],\"rows\":[[6]]}\n") << from_file.err;
  const CliRun bad = run_cli(fmt::format("query {} \"select nope from ops\"", shell_quoted(dir)));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("no such column: nope"), std::string::npos) << bad.err;
  EXPECT_EQ(run_cli(fmt::format("export {} --format parquet x.db", shell_quoted(dir))).exit_code, kExitUsage);
}

namespace {

// `sightline serve ROOT --port 0` as a child process; the URL (with its ?token=) comes from its first
// stdout line.
class ServeProcess {
 public:
  explicit ServeProcess(const fs::path& root) : log_(root.parent_path() / (root.filename().string() + ".serve.log")) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    const std::string root_arg = root.string();
    std::vector<std::string> args = {SIGHTLINE_CLI, "serve", root_arg, "--port", "0", "--ui", root_arg + "/no_ui"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, SIGHTLINE_CLI, &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string text = slurp(log_);
      const size_t at = text.find("http://");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        url_ = text.substr(at, text.find_first_of(" \n", at) - at);
        first_line_ = text.substr(0, text.find('\n'));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "sightline serve printed no URL: " << slurp(log_);
  }
  ~ServeProcess() {
    if (pid_ > 0) stop();
    fs::remove(log_);
  }
  // SIGTERM; returns the exit code (the server stops cleanly: 0).
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  const std::string& url() const { return url_; }
  const std::string& first_line() const { return first_line_; }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  std::string url_, first_line_;
};

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = test_profiles::generate().root / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(SightlineCli, ServeHelpAndBadOptionsAreUsageErrors) {
  const CliRun help = run_cli("serve --help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* option : {"--port", "--host", "--ui", "--max-upload-mb", "--token", "--no-token", "--allow-host"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option << " missing from: " << help.out;
  }
  EXPECT_EQ(run_cli("serve --port 70000").exit_code, kExitUsage);
  EXPECT_EQ(run_cli("serve --port -1").exit_code, kExitUsage);
  EXPECT_EQ(run_cli("serve --port http").exit_code, kExitUsage);
  EXPECT_EQ(run_cli("serve --max-upload-mb 0").exit_code, kExitUsage);
  const CliRun missing_root = run_cli("serve " + shell_quoted(test_profiles::generate().root / "no_such_root") +
                                      " --port 0");
  EXPECT_EQ(missing_root.exit_code, 2);
  EXPECT_NE(missing_root.err.find("not a readable directory"), std::string::npos) << missing_root.err;
  const CliRun open_network = run_cli("serve " + shell_quoted(test_profiles::generate().root) +
                                      " --port 0 --host 0.0.0.0 --no-token");
  EXPECT_EQ(open_network.exit_code, 2);
  EXPECT_NE(open_network.err.find("a token is required"), std::string::npos) << open_network.err;
  const CliRun upload_help = run_cli("upload --help");
  EXPECT_EQ(upload_help.exit_code, 0);
  EXPECT_NE(upload_help.out.find("--token"), std::string::npos) << upload_help.out;
  EXPECT_EQ(run_cli("upload " + shell_quoted(test_profiles::generate().fused.dir)).exit_code, kExitUsage);  // no --name
}

TEST(SightlineCli, ServeUploadAndStop) {
  const auto& g = test_profiles::generate();
  const fs::path root = fresh_dir("serve_root");
  ServeProcess server(root);
  ASSERT_FALSE(server.url().empty());
  EXPECT_EQ(server.first_line().rfind("sightline Explorer: http://127.0.0.1:", 0), 0u) << server.first_line();
  const size_t token_at = server.url().find("/?token=");
  ASSERT_NE(token_at, std::string::npos) << server.url();
  const std::string bare_url = server.url().substr(0, token_at);
  const std::string token = server.url().substr(token_at + 8);
  EXPECT_EQ(token.size(), 32u) << server.url();

  // Without the token the server refuses to store anything; --token passes it with a bare URL.
  const CliRun no_token = run_cli("upload " + shell_quoted(g.fused.dir) + " --name fused --server " + bare_url);
  EXPECT_EQ(no_token.exit_code, 2);
  EXPECT_NE(no_token.err.find("token"), std::string::npos) << no_token.err;
  EXPECT_FALSE(fs::exists(root / "fused"));
  const CliRun with_flag = run_cli("upload " + shell_quoted(g.fused.dir) + " --name flagged --server " + bare_url +
                                   " --token " + token);
  EXPECT_EQ(with_flag.exit_code, 0) << with_flag.err;
  EXPECT_TRUE(fs::exists(root / "flagged" / "manifest.json"));
  EXPECT_NE(server.first_line().find("serving profiles from " + root.string()), std::string::npos)
      << server.first_line();

  const CliRun uploaded =
      run_cli("upload " + shell_quoted(g.fused.dir) + " --name fused --server " + shell_quoted(server.url()));
  ASSERT_EQ(uploaded.exit_code, 0) << uploaded.err;
  EXPECT_NE(uploaded.out.find("as 'fused'"), std::string::npos) << uploaded.out;
  EXPECT_TRUE(fs::exists(root / "fused" / "manifest.json"));
  const CliRun viewed = run_cli("view " + shell_quoted(root / "fused") + " --output-format summary-json");
  EXPECT_EQ(viewed.exit_code, 0) << viewed.err;

  // The pair shape: a directory holding one NEFF and its NTFF.
  const fs::path pair = fresh_dir("pair_upload");
  for (const auto& entry : fs::directory_iterator(g.matmul.dir)) {
    if (entry.path().extension() == ".ntff") {
      fs::copy_file(entry.path(), pair / entry.path().filename());
      const auto name = sightline::formats::ntff_parse_file_name(entry.path().filename().string());
      ASSERT_TRUE(name);
      const std::string neff = sightline::formats::ntff_paired_neff_file_name(name->neff_hash);
      fs::copy_file(fs::path(g.matmul.dir) / neff, pair / neff);
      break;
    }
  }
  const CliRun pair_uploaded =
      run_cli("upload " + shell_quoted(pair) + " --name pair --server " + shell_quoted(server.url()));
  EXPECT_EQ(pair_uploaded.exit_code, 0) << pair_uploaded.err;
  EXPECT_TRUE(fs::exists(root / "pair" / "trace.json"));

  // Refusals come back with the server's message and exit code 2.
  const CliRun taken =
      run_cli("upload " + shell_quoted(g.fused.dir) + " --name fused --server " + shell_quoted(server.url()));
  EXPECT_EQ(taken.exit_code, 2);
  EXPECT_NE(taken.err.find("already exists"), std::string::npos) << taken.err;
  const CliRun bad_name =
      run_cli("upload " + shell_quoted(g.fused.dir) + " --name .hidden --server " + shell_quoted(server.url()));
  EXPECT_EQ(bad_name.exit_code, 2);
  EXPECT_NE(bad_name.err.find("not a profile name"), std::string::npos) << bad_name.err;

  EXPECT_EQ(server.stop(), 0);  // SIGTERM stops it cleanly
}

TEST(SightlineCli, UploadChecksLocallyAndExplainsAMissingServer) {
  const auto& g = test_profiles::generate();
  // Nothing listens on the port of a server that has stopped.
  std::string stopped_url;
  {
    ServeProcess server(fresh_dir("stopped_root"));
    stopped_url = server.url();
    EXPECT_EQ(server.stop(), 0);
  }
  const CliRun no_server =
      run_cli("upload " + shell_quoted(g.fused.dir) + " --name x --server " + shell_quoted(stopped_url));
  EXPECT_EQ(no_server.exit_code, 2);
  EXPECT_NE(no_server.err.find("start one with `sightline serve DIR`"), std::string::npos) << no_server.err;

  // Problems a server would refuse are found before any connection is made.
  const fs::path empty = fresh_dir("empty_upload");
  const CliRun not_profile =
      run_cli("upload " + shell_quoted(empty) + " --name x --server " + shell_quoted(stopped_url));
  EXPECT_EQ(not_profile.exit_code, 2);
  EXPECT_NE(not_profile.err.find("has no manifest.json"), std::string::npos) << not_profile.err;
  const fs::path truncated = fresh_dir("truncated_upload");
  fs::remove(truncated);
  fs::copy(g.fused.dir, truncated, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(truncated)) {
    if (entry.path().extension() == ".ntff") fs::resize_file(entry.path(), 100);
  }
  const CliRun corrupt =
      run_cli("upload " + shell_quoted(truncated) + " --name x --server " + shell_quoted(stopped_url));
  EXPECT_EQ(corrupt.exit_code, 2);
  EXPECT_NE(corrupt.err.find(".ntff"), std::string::npos) << corrupt.err;
  EXPECT_EQ(corrupt.err.find("start one"), std::string::npos) << corrupt.err;
}
