// The Explorer's HTTP server: the built UI as static files plus the JSON API over a ProfileStore.
//
//   ExplorerServer server({.profile_root = "profiles", .static_dir = "explorer/dist"});
//   int port = server.bind();  // 127.0.0.1 unless told otherwise; port 0 picks a free one
//   server.serve();            // blocks until stop()
//
// API (every error is a 4xx/5xx JSON object {"error": message}):
//   GET    /api/profiles                           list with manifest metadata
//   GET    /api/profiles/{name}/lanes              lanes, time range, flow count
//   GET    /api/profiles/{name}/events?start=&end=&lanes=1,2&width=   visible events, sub-pixel ones merged
//   GET    /api/profiles/{name}/events/{id}        one event: args, flows in/out, same-launch events
//   GET    /api/profiles/{name}/search?q=&limit=   events whose name contains q, by time
//   GET    /api/profiles/{name}/key_averages       operator table rebuilt from trace.json
//   GET    /api/profiles/{name}/device?neff=&core=&seq=   one execution's instruction trace
//   DELETE /api/profiles/{name}
#pragma once

#include <filesystem>
#include <memory>
#include <string>

namespace sightline::server {

struct ServerOptions {
  std::filesystem::path profile_root;
  std::filesystem::path static_dir;  // the built UI; empty or missing: the API only
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
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
