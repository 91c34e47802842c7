// The SQLite export (analysis/sqlite.h): what SQL counts and sums equals what the summary and the
// key_averages table say, the ids join, the cache is rebuilt when the profile is newer, and the three
// renderings of a result.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "analysis/profile_dir.h"
#include "analysis/sqlite.h"
#include "analysis/summary.h"
#include "profiles.h"
#include "sightline/error.h"
#include "sightline/profiler/key_averages.h"

using namespace sightline;
namespace fs = std::filesystem;

namespace {

const nlohmann::json& one(const analysis::QueryResult& r) {
  EXPECT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows.at(0).size(), 1u);
  return r.rows.at(0).at(0);
}

std::string exported(const test_profiles::Profiled& p, const std::string& name) {
  const std::string db = (test_profiles::generate().root / (name + ".db")).string();
  analysis::sqlite_export(analysis::profile_dir_load(p.dir), db);
  return db;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SqliteExport, CountsAndSumsAreTheSummarys) {
  const auto& g = test_profiles::generate();
  for (const auto& [p, name] : {std::pair{&g.naive, "naive"}, std::pair{&g.fused, "fused"}, std::pair{&g.matmul, "matmul"}}) {
    SCOPED_TRACE(name);
    const analysis::ProfileDir profile = analysis::profile_dir_load(p->dir);
    const analysis::Summary s = analysis::summarize_profile(profile);
    const std::string db = exported(*p, name);
    const auto q = [&](const std::string& sql) { return analysis::sqlite_query(db, sql); };
    EXPECT_EQ(one(q("select count(*) from executions")).get<uint64_t>(), s.executions);
    // Summed in the summary's order (NTFFs in manifest order, executions in file order), so exactly equal.
    EXPECT_EQ(one(q("select total(duration_ns) from executions")).get<double>(), s.total_time_ns);
    EXPECT_EQ(one(q("select sum(hbm_read_bytes + hbm_write_bytes) from instructions")).get<uint64_t>(), s.hbm_bytes());
    EXPECT_EQ(one(q("select count(*) from dma_transfers")).get<uint64_t>(), s.dma_transfer_count);
    EXPECT_EQ(one(q("select sum(bytes) from dma_transfers")).get<uint64_t>(), s.dma_transfer_bytes);
    uint64_t instructions = 0;
    for (const analysis::EngineSummary& e : s.engines) instructions += e.instruction_count;
    EXPECT_EQ(one(q("select count(*) from instructions")).get<uint64_t>(), instructions);
    const analysis::DeviceActivity activity = analysis::device_activity(*profile.trace);
    EXPECT_EQ(one(q("select count(*) from device_events where name = 'nc_exec_running'")).get<uint64_t>(),
              activity.executions);
    EXPECT_EQ(one(q("select count(*) from device_events where name = 'nc_model_switch'")).get<uint64_t>(),
              activity.switches);
    EXPECT_EQ(one(q("select max(end_ns) - min(start_ns) from device_events")).get<int64_t>(), activity.span_ns);
    // Op counts, self device and self CPU time: the key_averages rows (ops, and the runtime calls,
    // which torch's table lists as rows of their own).
    const auto averages = profiler::key_averages(*profile.trace, {.device_name = "neuron"});
    const analysis::QueryResult by_name =
        q("select name, count(*), sum(self_device_ns), sum(self_cpu_ns) from ops where kind = 'cpu_op' group by name "
          "union all select name, count(*), 0, sum(dur_ns) from runtime_calls group by name");
    size_t cpu_rows = 0;
    for (const profiler::FunctionEventAvg& row : averages.rows()) {
      if (row.device_type != profiler::DeviceType::cpu || row.is_user_annotation) continue;
      ++cpu_rows;
      bool found = false;
      for (const auto& r : by_name.rows) {
        if (r[0] != row.key) continue;
        found = true;
        EXPECT_EQ(r[1].get<int64_t>(), row.count) << row.key;
        EXPECT_EQ(r[2].get<int64_t>(), row.self_device_time_total_ns) << row.key;
        EXPECT_EQ(r[3].get<int64_t>(), row.self_cpu_time_total_ns) << row.key;
      }
      EXPECT_TRUE(found) << row.key;
    }
    EXPECT_EQ(by_name.rows.size(), cpu_rows);
  }
}

TEST(SqliteExport, IdsJoinAcrossTables) {
  const std::string db = exported(test_profiles::generate().naive, "naive_joins");
  const auto q = [&](const std::string& sql) { return analysis::sqlite_query(db, sql); };
  // Every execution has its op and its nc_exec_running; every instruction its execution.
  EXPECT_EQ(one(q("select count(*) from executions e left join ops o on o.id = e.op_id where o.id is null")), 0);
  EXPECT_EQ(one(q("select count(*) from executions e join device_events d on d.id = e.device_event_id "
                  "where d.name = 'nc_exec_running' and d.op_id = e.op_id")),
            one(q("select count(*) from executions")));
  EXPECT_EQ(one(q("select count(*) from instructions i left join executions e on e.id = i.execution_id "
                  "where e.id is null")), 0);
  EXPECT_EQ(one(q("select count(*) from dma_transfers t join instructions i on i.id = t.instruction_id "
                  "where i.engine = 'dma'")), one(q("select count(*) from dma_transfers")));
  // Flows: every launch of an op reaches its device work, framework -> runtime -> hardware.
  const analysis::QueryResult chain = q(
      "select o.name, r.name, d.name from flows f1 join ops o on o.id = f1.from_id "
      "join runtime_calls r on r.id = f1.to_id join flows f2 on f2.kind = 'ac2g' and f2.from_id = r.id "
      "join device_events d on d.id = f2.to_id where f1.kind = 'fwd' and d.name = 'nc_exec_running' "
      "order by d.start_ns");
  ASSERT_EQ(chain.rows.size(), 6u);
  EXPECT_EQ(chain.rows[0][0], "aten::mul");
  EXPECT_EQ(chain.rows[0][1], "nrta_execute_schedule");
  // The parent tree: every op below ProfilerStep#3.
  EXPECT_EQ(one(q("select count(*) from ops where parent_id is null and kind = 'cpu_op'")), 0);
  EXPECT_EQ(one(q("select value from meta where key = 'schema_version'")),
            std::to_string(analysis::kSqliteSchemaVersion));
}

TEST(SqliteExport, CacheIsBuiltOnceAndRebuiltWhenTheProfileIsNewer) {
  const fs::path dir = test_profiles::generate().root / "cached";
  fs::remove_all(dir);
  fs::copy(test_profiles::generate().fused.dir, dir, fs::copy_options::recursive);
  const std::string db = analysis::sqlite_cached(dir.string());
  EXPECT_EQ(db, (dir / analysis::kSqliteCacheFileName).string());
  const auto built = fs::last_write_time(db);
  EXPECT_EQ(analysis::sqlite_cached(dir.string()), db);
  EXPECT_EQ(fs::last_write_time(db), built) << "a fresh cache is reused";
  // A newer input (a re-export) makes it stale.
  fs::last_write_time(dir / "manifest.json", built + std::chrono::seconds(5));
  analysis::sqlite_cached(dir.string());
  EXPECT_GT(fs::last_write_time(db), built);
  EXPECT_EQ(one(analysis::sqlite_query(db, "select count(*) from executions")), 1);
}

TEST(SqliteQuery, RendersTextCsvAndJson) {
  const std::string db = exported(test_profiles::generate().naive, "naive_render");
  const analysis::QueryResult r = analysis::sqlite_query(
      db, "select name, count(*) as calls, null as empty, 1.5 as half from ops where name like 'aten::m%' "
          "group by name order by name");
  EXPECT_EQ(analysis::query_text(r),
            "name        calls  empty  half\n"
            "----------  -----  -----  ----\n"
            "aten::mean      1   NULL   1.5\n"
            "aten::mul       3   NULL   1.5\n"
            "(2 rows)\n");
  EXPECT_EQ(analysis::query_csv(r), "name,calls,empty,half\r\naten::mean,1,,1.5\r\naten::mul,3,,1.5\r\n");
  EXPECT_EQ(analysis::query_json(r),
            "{\"columns\":[\"name\",\"calls\",\"empty\",\"half\"],\"rows\":[[\"aten::mean\",1,null,1.5],"
            "[\"aten::mul\",3,null,1.5]]}\n");
  const analysis::QueryResult quoted = analysis::sqlite_query(db, "select 'a,\"b\"' as x");
  EXPECT_EQ(analysis::query_csv(quoted), "x\r\n\"a,\"\"b\"\"\"\r\n");
}

TEST(SqliteQuery, BadSqlAndMissingDatabasesAreClearErrors) {
  const std::string db = exported(test_profiles::generate().fused, "fused_errors");
  EXPECT_NE(error_of([&] { analysis::sqlite_query(db, "select nope from ops"); }).find("no such column: nope"),
            std::string::npos);
  EXPECT_NE(error_of([&] { analysis::sqlite_query(db, "  "); }).find("the query is empty"), std::string::npos);
  // Read-only: a query cannot change the profile's database.
  EXPECT_NE(error_of([&] { analysis::sqlite_query(db, "delete from ops"); }).find("readonly"), std::string::npos);
  EXPECT_NE(error_of([] { analysis::sqlite_query("/nonexistent/x.db", "select 1"); }).find("does not exist"),
            std::string::npos);
}
