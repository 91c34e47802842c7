// The Explorer's HTTP server: the built UI as static files plus the JSON API over a ProfileStore.
//
//   ExplorerServer server({.profile_root = "profiles", .static_dir = "explorer/dist"});
//   int port = server.bind();  // 127.0.0.1 unless told otherwise; port 0 picks a free one
//   server.serve();            // blocks until stop()
//
// API (every error is a 4xx/5xx JSON object {"error": message} that the UI shows as it is):
//   GET    /api/profiles                           list with manifest metadata
//   POST   /api/profiles?name=NAME[&device=trn2]   upload (multipart/form-data, below) -> 201
//          {"uploaded": NAME, "files": N, "bytes": B}; 400 bad name or malformed profile (naming the
//          file and the problem), 409 name taken, 413 body over the --max-upload-mb limit
//   GET    /api/profiles/{name}/lanes              lanes, time range, flow count
//   GET    /api/profiles/{name}/events?start=&end=&lanes=1,2&width=   visible events, sub-pixel ones merged
//   GET    /api/profiles/{name}/events/{id}        one event: args, flows in/out, same-launch events
//   GET    /api/profiles/{name}/search?q=&limit=   events whose name contains q, by time
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
//
// Upload: one multipart part per file, form field "file", the part's filename being the file's
// name in the profile directory (a leading folder, as a browser's directory upload sends it, is
// dropped). Either a whole profile directory (manifest.json, trace.json and what the manifest lists)
// or one neff_<hash>.neff with its <hash>_instid_0_vnc_<core>.ntff; ProfileStore::upload says what is
// checked and what a profile built from such a pair can show. Bodies over max_upload_bytes are
// refused before they are read into memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace sightline::server {

struct ServerOptions {
  std::filesystem::path profile_root;
  std::filesystem::path static_dir;  // the built UI; empty or missing: the API only
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  uint64_t max_upload_bytes = uint64_t{1024} << 20;  // request bodies larger than this are refused (413)
};

class ExplorerServer {
 public:
  explicit ExplorerServer(ServerOptions options);
  ~ExplorerServer();
  ExplorerServer(const ExplorerServer&) = delete;
  ExplorerServer& operator=(const ExplorerServer&) = delete;

  int bind();    // returns the bound port; throws sightline::Error when the address is taken
  void serve();  // after bind(); returns once stop() is called
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sightline::server
