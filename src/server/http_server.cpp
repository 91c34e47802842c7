#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "server/profile_store.h"
#include "sightline/error.h"

namespace sightline::server {
namespace {

using nlohmann::json;

constexpr size_t kDefaultSearchLimit = 200;
constexpr size_t kMaxSearchLimit = 10000;

void send_json(httplib::Response& response, const json& body, int status = 200) {
  response.status = status;
  response.set_header("Cache-Control", "no-store");
  // With the charset named, cpp-httplib (0.11) leaves the body uncompressed: it compresses an exact
  // "application/json" with brotli at its slowest setting whenever the browser accepts br, which took
  // seconds for a 2 MB window answer on 127.0.0.1, where compression buys nothing.
  response.set_content(body.dump(), "application/json; charset=utf-8");
}

std::optional<double> parse_double(std::string_view text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_unsigned(std::string_view text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

double required_double(const httplib::Request& request, const char* key) {
  if (!request.has_param(key)) throw RequestError(400, fmt::format("query parameter '{}' is required", key));
  auto value = parse_double(request.get_param_value(key));
  if (!value) throw RequestError(400, fmt::format("query parameter '{}' must be a number", key));
  return *value;
}

uint64_t optional_unsigned(const httplib::Request& request, const char* key, uint64_t fallback) {
  if (!request.has_param(key)) return fallback;
  auto value = parse_unsigned(request.get_param_value(key));
  if (!value)
    throw RequestError(400, fmt::format("query parameter '{}' must be a non-negative integer", key));
  return *value;
}

std::vector<uint32_t> parse_lane_list(std::string_view text) {
  std::vector<uint32_t> lanes;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    auto lane = parse_unsigned(text.substr(0, comma));
    if (!lane || *lane > UINT32_MAX)
      throw RequestError(400, "lanes must be a comma-separated list of lane ids");
    lanes.push_back(static_cast<uint32_t>(*lane));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return lanes;
}

}  // namespace

struct ExplorerServer::State {
  ServerOptions options;
  ProfileStore store;
  httplib::Server http;

  explicit State(ServerOptions server_options)
      : options(std::move(server_options)), store(options.profile_root) {}

  // Runs a handler and turns refusals and failures into JSON errors the UI can show.
  httplib::Server::Handler guarded(std::function<void(const httplib::Request&, httplib::Response&)> handler) {
    return [handler = std::move(handler)](const httplib::Request& request, httplib::Response& response) {
      try {
        handler(request, response);
      } catch (const RequestError& error) {
        send_json(response, {{"error", error.what()}}, error.status());
      } catch (const std::exception& error) {
        send_json(response, {{"error", fmt::format("internal error: {}", error.what())}}, 500);
      }
    };
  }

  void add_routes() {
    http.Get("/api/profiles", guarded([this](const httplib::Request&, httplib::Response& response) {
               send_json(response, store.list());
             }));
    http.Get(R"(/api/profiles/([^/]+)/lanes)",
             guarded([this](const httplib::Request& request, auto& response) {
               send_json(response, store.open(request.matches[1].str())->lanes_json());
             }));
    http.Get(R"(/api/profiles/([^/]+)/events)",
             guarded([this](const httplib::Request& request, auto& response) {
               auto profile = store.open(request.matches[1].str());
               WindowQuery query;
               query.start_us = required_double(request, "start");
               query.end_us = required_double(request, "end");
               query.width_px = static_cast<uint32_t>(
                   std::min<uint64_t>(optional_unsigned(request, "width", 1000), UINT32_MAX));
               if (request.has_param("lanes"))
                 query.lanes = parse_lane_list(request.get_param_value("lanes"));
               send_json(response, profile->window(query));
             }));
    http.Get(R"(/api/profiles/([^/]+)/events/([^/]+))",
             guarded([this](const httplib::Request& request, auto& response) {
               auto profile = store.open(request.matches[1].str());
               auto id = parse_unsigned(request.matches[2].str());
               if (!id || *id > UINT32_MAX) throw RequestError(400, "an event id is a non-negative integer");
               send_json(response, profile->event_details(static_cast<uint32_t>(*id)));
             }));
    http.Get(
        R"(/api/profiles/([^/]+)/search)", guarded([this](const httplib::Request& request, auto& response) {
          auto profile = store.open(request.matches[1].str());
          const size_t limit =
              std::min<uint64_t>(optional_unsigned(request, "limit", kDefaultSearchLimit), kMaxSearchLimit);
          send_json(response, profile->search(request.get_param_value("q"), limit));
        }));
    http.Get(R"(/api/profiles/([^/]+)/key_averages)",
             guarded([this](const httplib::Request& request, auto& response) {
               send_json(response, store.open(request.matches[1].str())->key_averages());
             }));
    http.Get(R"(/api/profiles/([^/]+)/device)",
             guarded([this](const httplib::Request& request, auto& response) {
               auto profile = store.open(request.matches[1].str());
               if (!request.has_param("neff")) throw RequestError(400, "query parameter 'neff' is required");
               const uint64_t core = optional_unsigned(request, "core", 0);
               if (core > UINT32_MAX) throw RequestError(400, "core is out of range");
               std::optional<uint64_t> sequence;
               if (request.has_param("seq")) sequence = optional_unsigned(request, "seq", 0);
               send_json(response, profile->device_execution(request.get_param_value("neff"),
                                                             static_cast<uint32_t>(core), sequence));
             }));
    http.Get(R"(/api/profiles/([^/]+)/summary)",
             guarded([this](const httplib::Request& request, auto& response) {
               send_json(response, store.summary(request.matches[1].str()));
             }));
    http.Get("/api/compare", guarded([this](const httplib::Request& request, auto& response) {
               for (const char* key : {"a", "b"}) {
                 if (!request.has_param(key))
                   throw RequestError(400, fmt::format("query parameter '{}' (a profile name) is required", key));
               }
               send_json(response, store.compare(request.get_param_value("a"), request.get_param_value("b")));
             }));
    http.Post("/api/profiles", guarded([this](const httplib::Request& request, auto& response) {
                if (!request.has_param("name") || request.get_param_value("name").empty()) {
                  throw RequestError(400, "query parameter 'name' (the new profile's name) is required");
                }
                if (!request.is_multipart_form_data()) {
                  throw RequestError(400, "an upload is a multipart/form-data body with one 'file' part per file");
                }
                std::vector<UploadFile> files;
                for (const auto& [field, part] : request.files) {
                  if (field != "file") {
                    throw RequestError(400, fmt::format("unexpected form field '{}': send every file as a "
                                                        "'file' part",
                                                        field));
                  }
                  files.push_back({part.filename, part.content});
                }
                UploadOptions upload_options;
                if (request.has_param("device")) upload_options.device = request.get_param_value("device");
                send_json(response, store.upload(request.get_param_value("name"), std::move(files), upload_options),
                          201);
              }));
    http.Delete(R"(/api/profiles/([^/]+))", guarded([this](const httplib::Request& request, auto& response) {
                  const std::string name = request.matches[1].str();
                  store.remove(name);
                  send_json(response, {{"deleted", name}});
                }));
    http.set_payload_max_length(options.max_upload_bytes);
    http.set_error_handler([this](const httplib::Request& request, httplib::Response& response) {
      if (!response.body.empty()) return;
      if (response.status == 413) {
        send_json(response,
                  {{"error", fmt::format("the request body is larger than this server's upload limit of {:g} MB "
                                         "({} bytes); restart `sightline serve` with a larger --max-upload-mb",
                                         static_cast<double>(options.max_upload_bytes) / (1 << 20),
                                         options.max_upload_bytes)}},
                  413);
        return;
      }
      const std::string what = request.path.starts_with("/api/") ? "no such API endpoint" : "no such file";
      send_json(response, {{"error", fmt::format("{}: {} {}", what, request.method, request.path)}},
                response.status);
    });
    if (!options.static_dir.empty() && std::filesystem::is_directory(options.static_dir)) {
      http.set_mount_point("/", options.static_dir.string());
    }
  }
};

ExplorerServer::ExplorerServer(ServerOptions options) : state_(std::make_unique<State>(std::move(options))) {
  state_->add_routes();
}

ExplorerServer::~ExplorerServer() = default;

int ExplorerServer::bind() {
  const ServerOptions& options = state_->options;
  const int port = options.port == 0
                       ? state_->http.bind_to_any_port(options.host)
                       : (state_->http.bind_to_port(options.host, options.port) ? options.port : -1);
  if (port <= 0) {
    throw Error(fmt::format("cannot listen on {}:{}: the address is in use or not local; pick another --port",
                            options.host, options.port));
  }
  return port;
}

void ExplorerServer::serve() { state_->http.listen_after_bind(); }

void ExplorerServer::stop() { state_->http.stop(); }

}  // namespace sightline::server
