// A profile directory as an SQLite database (`sightline export DIR --format sqlite OUT.db`,
// `sightline query DIR "SQL"`): one table per kind of record, with ids that join. The schema is
// docs/formats.md, "SQLite export"; this is its only writer.
//
//   analysis::sqlite_export(analysis::profile_dir_load("profiles/naive"), "naive.db");
//   analysis::QueryResult r = analysis::sqlite_query("naive.db", "select name, count(*) from ops group by name");
//   std::cout << analysis::query_text(r);
//
//   std::string db = analysis::sqlite_cached(dir);  // DIR/profile.sqlite, built or rebuilt when older
//                                                  // than the profile's files
//
// Its own archive (sightline_analysis_sqlite) beside the CLI, not installed: the library and its
// consumers carry no SQLite dependency. Errors (an unwritable path, SQL that does not prepare) are
// sightline::Error naming the file or quoting SQLite's message.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

inline constexpr int kSqliteSchemaVersion = 1;
inline constexpr const char* kSqliteCacheFileName = "profile.sqlite";

// Writes the database to `db_path` (a new file: written beside it, then renamed over it).
void sqlite_export(const ProfileDir& profile, const std::string& db_path);

// DIR/profile.sqlite, exported first when it is missing, older than manifest.json or any file the
// manifest lists, or of another schema version. Returns its path.
std::string sqlite_cached(const std::string& dir);

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;  // integers, reals, strings, null (blobs as hex strings)
};

// What a query may do beyond reading the profile's database. The CLI allows everything a read-only
// connection allows; the Explorer's server, whose queries come over HTTP, refuses ATTACH (which would
// read other SQLite files on the machine), answers at most max_rows rows and stops a query that runs
// longer than max_seconds.
struct QueryOptions {
  bool allow_attach = true;
  std::size_t max_rows = 0;   // 0: no limit; past it the query is an error asking for a LIMIT
  double max_seconds = 0;     // 0: no limit; past it (wall time) the query is interrupted, an error
};

// Runs one or more statements on the database opened read-only; the result is the last statement's rows.
QueryResult sqlite_query(const std::string& db_path, const std::string& sql, const QueryOptions& options = {});

std::string query_text(const QueryResult& result);  // aligned columns, numbers right-aligned, a row count
std::string query_csv(const QueryResult& result);   // RFC 4180, CRLF line ends, header first
std::string query_json(const QueryResult& result);  // {"columns": [...], "rows": [[...], ...]}

}  // namespace sightline::analysis
