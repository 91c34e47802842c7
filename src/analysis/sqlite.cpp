#include "analysis/sqlite.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "analysis/summary.h"
#include "device/cost_model.h"
#include "formats/manifest.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

namespace fs = std::filesystem;

// docs/formats.md, "SQLite export", shows this text; keep the two the same.
constexpr const char* kSchema = R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ops (
  id INTEGER PRIMARY KEY,        -- the op's correlation id
  name TEXT NOT NULL,
  kind TEXT NOT NULL,            -- 'cpu_op' or 'user_annotation'
  thread INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
  parent_id INTEGER,             -- ops.id of the enclosing op; NULL at the top
  self_cpu_ns INTEGER NOT NULL,
  device_ns INTEGER NOT NULL,    -- device time of its kernels and its children's
  self_device_ns INTEGER NOT NULL,
  flops INTEGER NOT NULL,
  input_shapes TEXT              -- JSON array of shapes, with record_shapes
);
CREATE TABLE runtime_calls (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  thread INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
  op_id INTEGER,                 -- ops.id of the op that made the call
  launch_id INTEGER NOT NULL     -- device_events.launch_id of the work it launched
);
CREATE TABLE device_events (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,            -- nc_exec_running, dmem_buf_copyin, nc_model_switch, ...
  kind TEXT NOT NULL,            -- 'exec', 'memcpy' or 'other'
  core INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL,
  op_id INTEGER,                 -- ops.id of the op it belongs to
  launch_id INTEGER NOT NULL,
  bytes INTEGER NOT NULL
);
CREATE TABLE flows (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,            -- 'fwd': ops.id -> runtime_calls.id; 'ac2g': runtime_calls.id -> device_events.id
  from_id INTEGER NOT NULL,
  to_id INTEGER NOT NULL
);
CREATE TABLE executions (
  id INTEGER PRIMARY KEY,
  executable TEXT NOT NULL,
  neff_hash TEXT NOT NULL,       -- 16 hex digits, as in the file names
  core INTEGER NOT NULL,
  seq INTEGER NOT NULL,          -- the runtime's submission number
  op_id INTEGER,                 -- ops.id of the op that launched it
  device_event_id INTEGER,       -- its nc_exec_running in device_events
  start_ns INTEGER NOT NULL,     -- host clock ns of device time 0
  duration_ns REAL NOT NULL      -- device time (device cycles: fractions of a ns)
);
CREATE TABLE instructions (
  id INTEGER PRIMARY KEY,
  execution_id INTEGER NOT NULL,
  engine TEXT NOT NULL,          -- tensor, vector, scalar, gpsimd, dma
  queue INTEGER,                 -- DMA queue; NULL on compute engines
  opcode TEXT NOT NULL,
  source_op TEXT,                -- the framework op it comes from
  start_ns REAL NOT NULL, end_ns REAL NOT NULL,  -- device ns from the execution's start
  semaphore_wait_ns REAL NOT NULL,
  hbm_read_bytes INTEGER NOT NULL, hbm_write_bytes INTEGER NOT NULL,
  onchip_bytes INTEGER NOT NULL,
  flops INTEGER NOT NULL
);
CREATE TABLE dma_transfers (
  instruction_id INTEGER PRIMARY KEY,
  execution_id INTEGER NOT NULL,
  queue INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  src_memory TEXT NOT NULL, dst_memory TEXT NOT NULL  -- hbm, sbuf, psum
);
CREATE TABLE memory_events (
  id INTEGER PRIMARY KEY,
  ts_ns INTEGER NOT NULL,
  thread INTEGER NOT NULL,
  core INTEGER,                  -- NULL: host memory
  address INTEGER NOT NULL,
  bytes INTEGER NOT NULL,        -- negative: a release
  total_allocated INTEGER NOT NULL, total_reserved INTEGER NOT NULL,
  op_id INTEGER                  -- ops.id of the op it is attributed to
);
CREATE INDEX runtime_calls_op ON runtime_calls(op_id);
CREATE INDEX device_events_op ON device_events(op_id);
CREATE INDEX executions_op ON executions(op_id);
CREATE INDEX instructions_execution ON instructions(execution_id);
)sql";

class Database {
 public:
  Database(const std::string& path, int flags) : path_(path) {
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      fail("cannot open the database '{}': {}", path, message);
    }
  }
  ~Database() { sqlite3_close(db_); }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string text = message ? message : sqlite3_errmsg(db_);
      sqlite3_free(message);
      fail("'{}': {}", path_, text);
    }
  }
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// One prepared INSERT, bound column by column and run once per row.
class Insert {
 public:
  Insert(Database& db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db.handle(), sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      fail("'{}': {} in {}", db.path(), sqlite3_errmsg(db.handle()), sql);
    }
  }
  ~Insert() { sqlite3_finalize(stmt_); }
  Insert(const Insert&) = delete;
  Insert& operator=(const Insert&) = delete;

  Insert& i(int64_t v) { sqlite3_bind_int64(stmt_, ++at_, v); return *this; }
  Insert& u(uint64_t v) { return i(static_cast<int64_t>(v)); }
  Insert& d(double v) { sqlite3_bind_double(stmt_, ++at_, v); return *this; }
  Insert& s(const std::string& v) {
    sqlite3_bind_text(stmt_, ++at_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Insert& null() { sqlite3_bind_null(stmt_, ++at_); return *this; }
  Insert& id_or_null(std::optional<int64_t> v) { return v ? i(*v) : null(); }
  int64_t run() {
    if (sqlite3_step(stmt_) != SQLITE_DONE) fail("'{}': {}", db_.path(), sqlite3_errmsg(db_.handle()));
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    at_ = 0;
    return sqlite3_last_insert_rowid(db_.handle());
  }

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  int at_ = 0;
};

bool is_host_op(const profiler::FunctionEvent& e) {
  return e.kind == profiler::EventKind::cpu_op || e.kind == profiler::EventKind::user_annotation;
}

std::string_view device_kind_name(profiler::EventKind kind) {
  switch (kind) {
    case profiler::EventKind::device_exec: return "exec";
    case profiler::EventKind::device_memcpy: return "memcpy";
    default: return "other";
  }
}

// device_events.id of each device event written.
using DeviceRows = std::map<const profiler::FunctionEvent*, int64_t>;

void export_trace(Database& db, const profiler::CollectedTrace& trace, DeviceRows& device_rows) {
  Insert op(db, "INSERT INTO ops VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
  Insert call(db, "INSERT INTO runtime_calls VALUES (NULL,?,?,?,?,?,?,?)");
  Insert device(db, "INSERT INTO device_events VALUES (NULL,?,?,?,?,?,?,?,?,?)");
  Insert flow(db, "INSERT INTO flows VALUES (NULL,?,?,?)");
  Insert memory(db, "INSERT INTO memory_events VALUES (NULL,?,?,?,?,?,?,?,?)");
  const auto& events = trace.events;
  const auto op_id = [&](uint64_t correlation) -> std::optional<int64_t> {
    if (correlation == 0) return std::nullopt;
    return static_cast<int64_t>(correlation);
  };
  std::map<uint64_t, int64_t> first_device_event_of_launch;  // launch id -> device_events.id
  std::vector<std::pair<uint64_t, int64_t>> calls;            // (launch id, runtime_calls.id)
  for (const profiler::FunctionEvent& e : events) {
    if (is_host_op(e)) {
      std::optional<int64_t> parent;
      if (e.parent >= 0 && is_host_op(events[static_cast<size_t>(e.parent)])) {
        parent = static_cast<int64_t>(events[static_cast<size_t>(e.parent)].id);
      }
      op.u(e.id).s(e.name).s(e.kind == profiler::EventKind::cpu_op ? "cpu_op" : "user_annotation").i(e.thread);
      op.i(e.start_ns).i(e.end_ns).i(e.duration_ns()).id_or_null(parent).i(e.self_cpu_time_total_ns);
      op.i(e.device_time_total_ns).i(e.self_device_time_total_ns).u(e.flops);
      if (e.input_shapes.empty()) {
        op.null();
      } else {
        op.s(nlohmann::json(e.input_shapes.to_vector()).dump());
      }
      op.run();
    } else if (e.kind == profiler::EventKind::runtime) {
      const int64_t id = call.s(e.name).i(e.thread).i(e.start_ns).i(e.end_ns).i(e.duration_ns())
                             .id_or_null(op_id(e.external_id)).u(e.id).run();
      calls.emplace_back(e.id, id);
      if (e.external_id != 0) flow.s("fwd").u(e.external_id).i(id).run();
    } else if (profiler::is_device_kind(e.kind)) {
      const int64_t id = device.s(e.name).s(std::string(device_kind_name(e.kind))).i(e.device_index).i(e.start_ns)
                             .i(e.end_ns).i(e.duration_ns()).id_or_null(op_id(e.external_id)).u(e.id).u(e.bytes)
                             .run();
      first_device_event_of_launch.try_emplace(e.id, id);  // events are in start order
      device_rows.emplace(&e, id);
    }
  }
  for (const auto& [launch, call_id] : calls) {
    if (auto it = first_device_event_of_launch.find(launch); it != first_device_event_of_launch.end()) {
      flow.s("ac2g").i(call_id).i(it->second).run();
    }
  }
  for (const profiler::MemoryEvent& m : trace.memory) {
    memory.i(m.ts_ns).i(m.thread);
    if (m.device_index < 0) {
      memory.null();
    } else {
      memory.i(m.device_index);
    }
    memory.u(m.address).i(m.bytes).i(m.total_allocated).i(m.total_reserved);
    std::optional<int64_t> owner;
    if (m.owner >= 0 && is_host_op(events[static_cast<size_t>(m.owner)])) {
      owner = static_cast<int64_t>(events[static_cast<size_t>(m.owner)].id);
    }
    memory.id_or_null(owner).run();
  }
}

void export_executions(Database& db, const ProfileDir& profile, const DeviceRows& device_rows) {
  Insert execution(db, "INSERT INTO executions VALUES (NULL,?,?,?,?,?,?,?,?)");
  Insert instruction(db, "INSERT INTO instructions VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?)");
  Insert dma(db, "INSERT INTO dma_transfers VALUES (?,?,?,?,?,?)");
  const auto exec_event = executions_in_trace(profile);
  for (const TracedExecutable& traced : profile.traced) {
    const device::Executable& exe = *traced.executable;
    for (const formats::NtffExecution& run : traced.trace.executions) {
      std::optional<int64_t> event;
      if (const auto found = exec_event.find(&run); found != exec_event.end()) event = device_rows.at(found->second);
      const int64_t execution_id = execution.s(exe.name).s(fmt::format("{:016x}", traced.trace.neff_hash))
                                       .u(traced.trace.core).u(run.seq)
                                       .id_or_null(run.correlation ? std::optional<int64_t>(run.correlation)
                                                                   : std::nullopt)
                                       .id_or_null(event).i(run.start_ns).d(run.duration_ns).run();
      for_each_record(exe, run, [&](const device::InstructionRecord& r, const device::Instruction& in) {
        const bool is_dma = r.engine == device::Engine::dma;
        instruction.i(execution_id).s(std::string(device::engine_name(r.engine)));
        if (is_dma) {
          instruction.u(r.queue);
        } else {
          instruction.null();
        }
        instruction.s(std::string(device::opcode_name(in.opcode)));
        if (in.source_op < exe.source_ops.size()) {
          instruction.s(exe.source_ops[in.source_op]);
        } else {
          instruction.null();
        }
        const int64_t id = instruction.d(r.start_ns).d(r.end_ns).d(r.semaphore_wait_ns).u(r.hbm_bytes_read)
                               .u(r.hbm_bytes_written).u(uint64_t{r.onchip_bytes_read} + r.onchip_bytes_written)
                               .u(r.flops).run();
        if (is_dma) {
          dma.i(id).i(execution_id).u(r.queue).u(device::dma_transfer_bytes(in))
              .s(std::string(device::memory_name(in.src0.memory))).s(std::string(device::memory_name(in.dst.memory)))
              .run();
        }
      });
    }
  }
}

fs::file_time_type newest_input(const std::string& dir, const formats::Manifest& manifest) {
  fs::file_time_type newest = fs::last_write_time(fs::path(dir) / formats::kManifestFileName);
  for (const formats::ManifestFile& file : manifest.files) {
    std::error_code ec;
    const auto t = fs::last_write_time(fs::path(dir) / file.path, ec);
    if (!ec) newest = std::max(newest, t);
  }
  return newest;
}

bool schema_is_current(const std::string& db_path) {
  try {
    const QueryResult r = sqlite_query(db_path, "SELECT value FROM meta WHERE key = 'schema_version'");
    return r.rows.size() == 1 && r.rows[0][0] == std::to_string(kSqliteSchemaVersion);
  } catch (const Error&) {
    return false;
  }
}

std::string cell_text(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{}", v.get<double>());
  return v.dump();
}

}  // namespace

void sqlite_export(const ProfileDir& profile, const std::string& db_path) {
  const std::string staging = fmt::format("{}.tmp-{}", db_path, ::getpid());
  std::error_code ec;
  fs::remove(staging, ec);
  try {
    {
      Database db(staging, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
      db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; BEGIN;");
      db.exec(kSchema);
      Insert meta(db, "INSERT INTO meta VALUES (?,?)");
      meta.s("schema_version").s(std::to_string(kSqliteSchemaVersion)).run();
      meta.s("sightline_version").s(formats::sightline_version_string()).run();
      meta.s("device").s(profile.manifest.device.name).run();
      meta.s("profile").s(profile.path).run();
      DeviceRows device_rows;
      if (profile.trace) export_trace(db, *profile.trace, device_rows);
      export_executions(db, profile, device_rows);
      db.exec("COMMIT;");
    }
    fs::rename(staging, db_path);
  } catch (...) {
    fs::remove(staging, ec);
    throw;
  }
}

std::string sqlite_cached(const std::string& dir) {
  const std::string db_path = (fs::path(dir) / kSqliteCacheFileName).string();
  std::error_code ec;
  if (fs::exists(db_path, ec) && fs::exists(fs::path(dir) / formats::kManifestFileName, ec)) {
    const formats::Manifest manifest = formats::manifest_load(dir);
    if (fs::last_write_time(db_path) >= newest_input(dir, manifest) && schema_is_current(db_path)) return db_path;
  }
  sqlite_export(profile_dir_load(dir), db_path);
  return db_path;
}

QueryResult sqlite_query(const std::string& db_path, const std::string& sql, const QueryOptions& options) {
  std::error_code ec;
  SIGHTLINE_CHECK(fs::exists(db_path, ec), "'{}' does not exist; pass a profile output directory or a database "
                  "written by `sightline export DIR --format sqlite FILE`", db_path);
  Database db(db_path, SQLITE_OPEN_READONLY);
  // Checked every few thousand virtual-machine steps; a non-zero answer interrupts the statement.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                               std::chrono::duration<double>(options.max_seconds));
  if (options.max_seconds > 0) {
    sqlite3_progress_handler(
        db.handle(), 10000,
        [](void* at) {
          return std::chrono::steady_clock::now() > *static_cast<const std::chrono::steady_clock::time_point*>(at) ? 1 : 0;
        },
        const_cast<std::chrono::steady_clock::time_point*>(&deadline));
  }
  if (!options.allow_attach) {
    sqlite3_set_authorizer(
        db.handle(),
        [](void*, int action, const char*, const char*, const char*, const char*) {
          return action == SQLITE_ATTACH || action == SQLITE_DETACH ? SQLITE_DENY : SQLITE_OK;
        },
        nullptr);
  }
  QueryResult result;
  const char* next = sql.c_str();
  bool any = false;
  while (next != nullptr && *next != '\0') {
    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db.handle(), next, -1, &stmt, &tail) != SQLITE_OK) {
      fail("SQL error: {}; the tables are listed in docs/formats.md (\"SQLite export\"), or run "
           "\"select name, sql from sqlite_master\"", sqlite3_errmsg(db.handle()));
    }
    next = tail;
    if (stmt == nullptr) continue;  // whitespace or a comment
    any = true;
    QueryResult current;
    const int columns = sqlite3_column_count(stmt);
    for (int c = 0; c < columns; ++c) current.columns.emplace_back(sqlite3_column_name(stmt, c));
    int rc = SQLITE_OK;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      std::vector<nlohmann::json> row;
      for (int c = 0; c < columns; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER: row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c))); break;
          case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(stmt, c)); break;
          case SQLITE_TEXT:
            row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, c)),
                                         static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
            break;
          case SQLITE_BLOB: {
            const auto* bytes = static_cast<const unsigned char*>(sqlite3_column_blob(stmt, c));
            std::string hex;
            for (int b = 0; b < sqlite3_column_bytes(stmt, c); ++b) hex += fmt::format("{:02x}", bytes[b]);
            row.emplace_back(hex);
            break;
          }
          default: row.emplace_back(nullptr);
        }
      }
      current.rows.push_back(std::move(row));
      if (options.max_rows > 0 && current.rows.size() > options.max_rows) {
        sqlite3_finalize(stmt);
        fail("the query returns more than {} rows; add a LIMIT or aggregate", options.max_rows);
      }
    }
    const std::string message = sqlite3_errmsg(db.handle());
    sqlite3_finalize(stmt);
    SIGHTLINE_CHECK(rc != SQLITE_INTERRUPT, "the query ran longer than {} s and was stopped; add a LIMIT or a WHERE",
                    options.max_seconds);
    SIGHTLINE_CHECK(rc == SQLITE_DONE, "SQL error: {}", message);
    if (columns > 0) result = std::move(current);
  }
  SIGHTLINE_CHECK(any, "the query is empty; pass SQL, e.g. \"select name, count(*) from ops group by name\"");
  return result;
}

std::string query_text(const QueryResult& r) {
  std::vector<size_t> width(r.columns.size());
  std::vector<bool> numeric(r.columns.size(), true);
  for (size_t c = 0; c < r.columns.size(); ++c) width[c] = r.columns[c].size();
  for (const auto& row : r.rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].is_null() ? size_t{4} : cell_text(row[c]).size());
      if (!row[c].is_number() && !row[c].is_null()) numeric[c] = false;
    }
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      text += c ? "  " : "";
      text += numeric[c] ? fmt::format("{:>{}}", cells[c], width[c]) : fmt::format("{:<{}}", cells[c], width[c]);
    }
    while (text.ends_with(' ')) text.pop_back();
    return text + "\n";
  };
  std::string out = line(r.columns);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  out += line(rule);
  for (const auto& row : r.rows) {
    std::vector<std::string> cells;
    for (const nlohmann::json& v : row) cells.push_back(v.is_null() ? "NULL" : cell_text(v));
    out += line(cells);
  }
  return out + fmt::format("({} row{})\n", r.rows.size(), r.rows.size() == 1 ? "" : "s");
}

std::string query_csv(const QueryResult& r) {
  const auto field = [](const std::string& text) {
    if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  std::string out;
  for (size_t c = 0; c < r.columns.size(); ++c) {
    if (c) out += ',';
    out += field(r.columns[c]);
  }
  out += "\r\n";
  for (const auto& row : r.rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) out += ',';
      out += field(cell_text(row[c]));
    }
    out += "\r\n";
  }
  return out;
}

std::string query_json(const QueryResult& r) {
  nlohmann::json doc = {{"columns", r.columns}, {"rows", nlohmann::json::array()}};
  for (const auto& row : r.rows) doc["rows"].push_back(row);
  return doc.dump() + "\n";
}

}  // namespace sightline::analysis
