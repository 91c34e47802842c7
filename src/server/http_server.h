// The Explorer's HTTP server: the built UI as static files plus the JSON API over a ProfileStore.
//
//   ExplorerServer server({.profile_root = "profiles", .static_dir = "explorer/dist"});
//   int port = server.bind();  // 127.0.0.1 unless told otherwise; port 0 picks a free one
//   std::string url = server.url();  // http://127.0.0.1:PORT/?token=... (what the user opens)
//   server.serve();            // blocks until stop()
//
// Who may do what (docs/security.md):
//   - every request must name this server in its Host header: 127.0.0.1, localhost or [::1], the
//     --host value, or a name in allowed_hosts, with the bound port (DNS rebinding gets 403);
//   - a state-changing request (POST, PUT, PATCH, DELETE) is refused (403) when its Origin header
//     names another site, and must carry the per-run token, as the header X-Sightline-Token or the
//     query parameter token; on an address that is not loopback every /api/ request needs it;
//   - no request other than an upload may carry a body; an upload's body is counted as it is read,
//     after any Content-Encoding is undone and whatever its Transfer-Encoding, and refused (413) past
//     max_upload_bytes;
//   - a window answer is bounded: lane ids are deduplicated and at most kMaxWindowEntries events and
//     merged boxes are sent (more is a 400 that says how to ask for less);
//   - reads and writes time out (io_timeout), and so does a request as a whole: its request line and
//     headers must arrive within header_timeout of its first byte, its body and its answer must move
//     at min_bytes_per_second or more after that much grace, and no request's I/O lasts past
//     request_timeout; a client that trickles a byte a second is disconnected, whatever it sends;
//   - requests are served by a pool of worker_threads, so a few slow clients do not hold every worker.
//
// API (every error is a 4xx/5xx JSON object {"error": message} that the UI shows as it is):
//   GET    /api/profiles                           list with manifest metadata
//   POST   /api/profiles?name=NAME[&device=trn2]   upload (multipart/form-data, below) -> 201
//          {"uploaded": NAME, "files": N, "bytes": B}; 400 bad name or malformed profile (naming the
//          file and the problem), 409 name taken, 413 body over the --max-upload-mb limit
//   GET    /api/profiles/{name}/lanes              lanes (name, its parts and layer from
//                                                   profiler/lane_names.h), time range, flow count
//   GET    /api/profiles/{name}/events?start=&end=&lanes=1,2&width=   visible events, sub-pixel ones merged
//   GET    /api/profiles/{name}/events/{id}        one event: args, flows in/out, same-launch events
//   GET    /api/profiles/{name}/query?sql=         `sightline query`: {"columns", "rows"} from the
//                                                   profile's SQLite database (read-only, no ATTACH)
//   GET    /api/profiles/{name}/search?q=&limit=&offset=   events whose name contains q, by time;
//          {"total", "offset", "matches"}: matches offset.. of all total, at most limit of them
//   GET    /api/profiles/{name}/key_averages       operator table rebuilt from trace.json
//   GET    /api/profiles/{name}/device?neff=&core=&seq=   one execution's instruction trace
//   GET    /api/profiles/{name}/summary            `sightline view --output-format summary-json` (flat
//          metrics and "insights") plus "roofline": {"device", "peak_flops_per_s", "hbm_bytes_per_s",
//          "ridge_point", "points": [{"kind": "executable"|"op", "name", "intensity",
//          "achieved_flops_per_s", "attainable_flops_per_s", "bound": "memory-bound"|"compute-bound",
//          "efficiency", "time_us", "executions", "flops", "hbm_bytes"}]}; a profile without device
//          executions has zero metrics and no points. 422 when analysis refuses the profile.
//   GET    /api/compare?a=NAME&b=NAME              `sightline compare --output-format json` of the two
//          (ranked executable, op and engine deltas, "total_time_a_ns"/"total_time_b_ns") with "a"
//          and "b" set to the names, plus "total_a_us" and "total_b_us"
//   DELETE /api/profiles/{name}
// While a large profile is indexed past its first view (ProfileIndex, FirstViewOptions), lanes, events,
// an event and search answer from the part indexed so far and add "complete": false and "progress":
// {"first_view_bytes", "indexed_bytes", "trace_bytes", "fraction"}; complete answers have neither.
//
// Upload: one multipart part per file, form field "file", the part's filename being the file's
// name in the profile directory (a leading folder, as a browser's directory upload sends it, is
// dropped). Either a whole profile directory (manifest.json, trace.json and what the manifest lists)
// or one neff_<hash>.neff with its <hash>_instid_0_vnc_<core>.ntff; ProfileStore::upload says what is
// checked and what a profile built from such a pair can show. Parts are streamed into the store's
// staging directory as they arrive; bodies over max_upload_bytes are refused (413).
#pragma once

#include <cstdint>
#include <filesystem>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sightline::server {

struct ServerOptions {
  std::filesystem::path profile_root;
  std::filesystem::path static_dir{};  // the built UI; empty or missing: the API only
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  uint64_t max_upload_bytes = uint64_t{1024} << 20;  // request bodies larger than this are refused (413)
  // The per-run secret that writes carry; empty: a random one is made (ExplorerServer::token()).
  std::string token{};
  // false: writes need no token. Only allowed on a loopback host; the constructor refuses it elsewhere.
  bool require_token = true;
  // Host names clients may use besides 127.0.0.1, localhost, [::1] and `host` (for --host 0.0.0.0:
  // the machine's name or address as others type it).
  std::vector<std::string> allowed_hosts{};
  unsigned worker_threads = 0;                  // 0: max(64, 4 x hardware threads)
  std::chrono::milliseconds io_timeout{5000};  // per read or write on a connection
  // Whole-request bounds (docs/security.md): cpp-httplib's timeouts are per read, which a client that
  // sends one byte every second never trips.
  std::chrono::milliseconds header_timeout{10000};    // request line + headers, from the request's first byte
  std::chrono::milliseconds request_timeout{300000};  // every read and write of one request, from its first byte
  uint64_t min_bytes_per_second = uint64_t{64} << 10;  // body and answer, after header_timeout of grace
};

// Header that carries the token on writes (the query parameter "token" works too).
inline constexpr std::string_view kTokenHeader = "X-Sightline-Token";

// true for 127.0.0.1 (and 127.x.y.z), ::1 and localhost: addresses other machines cannot reach.
bool is_loopback_host(std::string_view host);

class ExplorerServer {
 public:
  explicit ExplorerServer(ServerOptions options);
  ~ExplorerServer();
  ExplorerServer(const ExplorerServer&) = delete;
  ExplorerServer& operator=(const ExplorerServer&) = delete;

  int bind();    // returns the bound port; throws sightline::Error when the address is taken
  void serve();  // after bind(); returns once stop() is called
  void stop();

  const std::string& token() const;
  // After bind(): http://HOST:PORT/ with ?token=... when writes need one; the URL to open.
  std::string url() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sightline::server
