#include "server/http_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fmt/ranges.h>
#include <httplib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string_view>

#include "server/profile_store.h"
#include "sightline/error.h"

namespace sightline::server {
namespace {

using nlohmann::json;

constexpr size_t kDefaultSearchLimit = 200;
constexpr size_t kMaxSearchLimit = 10000;
constexpr size_t kMaxLaneIds = 4096;       // a longer lanes= list is refused before any work
constexpr size_t kMaxUploadParts = 1024;   // files in one upload (cpp-httplib's own multipart limit)
// Past the upload limit the body is still read, and dropped, for this many bytes, so that a client
// a little over the limit gets the 413 answer rather than a reset connection.
constexpr uint64_t kDrainPastLimit = uint64_t{8} << 20;

void send_json(httplib::Response& response, const json& body, int status = 200) {
  response.status = status;
  response.set_header("Cache-Control", "no-store");
  // With the charset named, cpp-httplib (0.11) leaves the body uncompressed: it compresses an exact
  // "application/json" with brotli at its slowest setting whenever the browser accepts br, which took
  // seconds for a 2 MB window answer on 127.0.0.1, where compression buys nothing.
  // Text from files (names, error messages quoting a damaged manifest) may hold invalid UTF-8: it is
  // replaced by U+FFFD rather than turning the answer into an exception.
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// "name", "name:port", "[v6]" or "[v6]:port" (a Host header, or an Origin without its scheme).
struct HostPort {
  std::string name;  // lowercased; IPv6 keeps its brackets
  std::optional<int> port;
};

std::optional<HostPort> split_host_port(std::string_view text) {
  HostPort out;
  std::string_view rest;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    out.name = lowercase(text.substr(0, close + 1));
    rest = text.substr(close + 1);
  } else {
    const size_t colon = text.find(':');
    out.name = lowercase(text.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon);
  }
  if (out.name.empty()) return std::nullopt;
  if (!rest.empty()) {
    if (rest.front() != ':' || rest.size() == 1) return std::nullopt;
    int port = 0;
    auto [end, error] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), port);
    if (error != std::errc{} || end != rest.data() + rest.size() || port <= 0 || port > 65535) return std::nullopt;
    out.port = port;
  }
  return out;
}

// The name a client types for `host`: IPv6 addresses in brackets.
std::string host_name_of(std::string_view host) {
  if (host.find(':') != std::string_view::npos && !host.starts_with('[')) return lowercase(fmt::format("[{}]", host));
  return lowercase(host);
}

bool is_wildcard_host(std::string_view host) { return host == "0.0.0.0" || host == "::" || host == "[::]"; }

std::string random_token() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", static_cast<uint32_t>(device()));
  return token;
}

// Compares without stopping at the first difference, so response time does not reveal the token.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

bool is_state_changing(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
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
    if (lanes.size() == kMaxLaneIds) {
      throw RequestError(400, fmt::format("lanes lists more than {} lane ids; ask for fewer lanes", kMaxLaneIds));
    }
    const size_t comma = text.find(',');
    auto lane = parse_unsigned(text.substr(0, comma));
    if (!lane || *lane > UINT32_MAX)
      throw RequestError(400, "lanes must be a comma-separated list of lane ids");
    lanes.push_back(static_cast<uint32_t>(*lane));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return lanes;
}

// Whole-request deadlines. cpp-httplib 0.11 bounds each read and write (set_read_timeout), and an
// idle keep-alive wait, but not a request: a client that sends a header byte every second, or an
// upload body a byte a second, keeps its worker as long as it likes. It has no hook on accepted
// sockets either (set_socket_options applies to the listening one), so the server below replaces
// Server::process_and_close_socket, the per-connection loop (a virtual function), with the same
// keep-alive loop over a Stream of its own that checks a deadline on every read and write:
//   - the request line and headers must arrive within header_timeout of the request's first byte;
//   - the body must then arrive at min_bytes_per_second at least, after header_timeout of grace
//     (mod_reqtimeout's rule: deadline = body start + grace + bytes so far / rate), and so must the
//     answer as the client reads it;
//   - no read or write of the request happens later than request_timeout after its first byte.
// A request past its deadline has its connection closed. Each read also waits at most io_timeout.
struct RequestLimits {
  std::chrono::milliseconds io_timeout;
  std::chrono::milliseconds header_timeout;
  std::chrono::milliseconds request_timeout;
  uint64_t min_bytes_per_second;
};

class DeadlineStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  DeadlineStream(int sock, const RequestLimits& limits) : sock_(sock), limits_(limits) {}

  // The next request on the connection starts now: its deadlines count from here.
  void begin_request() {
    start_ = Clock::now();
    headers_read_ = false;
    writing_ = false;
    body_bytes_ = written_bytes_ = 0;
  }
  // Called once the request line and headers are in (cpp-httplib's setup_request hook).
  void headers_read() {
    headers_read_ = true;
    body_start_ = Clock::now();
  }
  bool timed_out() const { return timed_out_; }
  bool has_buffered() const { return buffer_at_ < buffer_end_; }

  bool is_readable() const override { return has_buffered() || wait(POLLIN, read_deadline()); }
  bool is_writable() const override { return wait(POLLOUT, write_deadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (!wait(POLLIN, read_deadline())) return -1;
      ssize_t got = 0;
      do {
        got = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      } while (got < 0 && errno == EINTR);
      if (got <= 0) return got;
      buffer_at_ = 0;
      buffer_end_ = static_cast<size_t>(got);
    }
    const size_t n = std::min(size, buffer_end_ - buffer_at_);
    std::memcpy(ptr, buffer_.data() + buffer_at_, n);
    buffer_at_ += n;
    if (headers_read_) body_bytes_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!writing_) {
      writing_ = true;
      write_start_ = Clock::now();
    }
    if (!wait(POLLOUT, write_deadline())) return -1;
    ssize_t sent = 0;
    do {
      sent = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent > 0) written_bytes_ += static_cast<uint64_t>(sent);
    return sent;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(::getsockname, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  Clock::time_point rate_deadline(Clock::time_point since, uint64_t bytes) const {
    const uint64_t rate = std::max<uint64_t>(1, limits_.min_bytes_per_second);
    // bytes / rate seconds, in milliseconds without overflow for any byte count a request can move.
    const auto allowance = std::chrono::milliseconds(bytes / rate * 1000 + bytes % rate * 1000 / rate);
    return std::min(start_ + limits_.request_timeout, since + limits_.header_timeout + allowance);
  }
  Clock::time_point read_deadline() const {
    if (!headers_read_) return std::min(start_ + limits_.header_timeout, start_ + limits_.request_timeout);
    return rate_deadline(body_start_, body_bytes_);
  }
  // Before the first write (is_writable asks first), the answer's clock would start now.
  Clock::time_point write_deadline() const {
    return writing_ ? rate_deadline(write_start_, written_bytes_) : rate_deadline(Clock::now(), 0);
  }

  // Waits until the socket is ready for `events`, at most io_timeout and never past `deadline`.
  bool wait(short events, Clock::time_point deadline) const {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      const bool capped = left > limits_.io_timeout;
      pollfd entry{.fd = sock_, .events = events, .revents = 0};
      const int ready = ::poll(&entry, 1, static_cast<int>(std::min(left, limits_.io_timeout).count()));
      if (ready > 0) return true;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0 && !capped) timed_out_ = true;  // the request's deadline, not only one read's wait
      return false;
    }
  }

  template <typename Query>
  void address_of(Query query, std::string& ip, int& port) const {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (query(sock_, reinterpret_cast<sockaddr*>(&address), &length) != 0) return;
    std::array<char, INET6_ADDRSTRLEN> text{};
    if (address.ss_family == AF_INET) {
      const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
      if (::inet_ntop(AF_INET, &v4.sin_addr, text.data(), text.size()) != nullptr) ip = text.data();
      port = ntohs(v4.sin_port);
    } else if (address.ss_family == AF_INET6) {
      const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
      if (::inet_ntop(AF_INET6, &v6.sin6_addr, text.data(), text.size()) != nullptr) ip = text.data();
      port = ntohs(v6.sin6_port);
    }
  }

  int sock_;
  RequestLimits limits_;
  Clock::time_point start_ = Clock::now(), body_start_ = start_, write_start_ = start_;
  bool headers_read_ = false;
  bool writing_ = false;
  uint64_t body_bytes_ = 0, written_bytes_ = 0;
  mutable bool timed_out_ = false;
  std::array<char, 4096> buffer_{};
  size_t buffer_at_ = 0, buffer_end_ = 0;
};

// The stream of the request this worker thread is serving, so that a handler can tell a body cut off
// by its deadline from one the client ended early.
thread_local const DeadlineStream* current_stream = nullptr;

class DeadlineServer final : public httplib::Server {
 public:
  explicit DeadlineServer(const RequestLimits& limits) : limits_(limits) {}

 private:
  // cpp-httplib's own loop (detail::process_server_socket), over a DeadlineStream that lives as long
  // as the connection, so bytes of a pipelined next request that were read with this one are kept.
  bool process_and_close_socket(socket_t sock) override {
    DeadlineStream stream(sock, limits_);
    current_stream = &stream;
    bool ok = false;
    for (size_t count = keep_alive_max_count_; count > 0 && next_request_arrives(stream); --count) {
      stream.begin_request();
      bool connection_closed = false;
      ok = process_request(stream, count == 1, connection_closed,
                           [&stream](httplib::Request&) { stream.headers_read(); });
      if (!ok || connection_closed || stream.timed_out()) break;
    }
    current_stream = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  // Waits, up to the keep-alive timeout, for the first byte of the next request; false when the
  // server is stopping (checked every 50 ms, as cpp-httplib does every 10) or the client is silent.
  bool next_request_arrives(const DeadlineStream& stream) const {
    if (stream.has_buffered()) return true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET) {
      pollfd entry{.fd = stream.socket(), .events = POLLIN, .revents = 0};
      const int ready = ::poll(&entry, 1, 50);
      if (ready > 0) return true;
      if (ready < 0 && errno != EINTR) return false;
      if (std::chrono::steady_clock::now() >= until) return false;
    }
    return false;
  }

  RequestLimits limits_;
};

}  // namespace

bool is_loopback_host(std::string_view host) {
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8 as an address, not a name that merely starts with "127." and resolves elsewhere.
  in_addr address{};
  return ::inet_pton(AF_INET, std::string(host).c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

struct ExplorerServer::State {
  ServerOptions options;
  ProfileStore store;
  DeadlineServer http;
  std::set<std::string> host_names;  // what a Host header may name
  int port = 0;                      // after bind()
  // httplib's stop() does nothing before its accept loop runs, so a stop that comes first (a SIGTERM
  // right after the URL is printed) would be lost and serve() would never return. stop() records the
  // request; serve() does not start once one is recorded, and stop() waits for a started loop to run
  // before stopping it. Sequentially consistent, so that one of the two always sees the other.
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> serving{false};
  std::atomic<bool> served{false};

  explicit State(ServerOptions server_options)
      : options(std::move(server_options)),
        store(options.profile_root),
        http(RequestLimits{options.io_timeout, options.header_timeout, options.request_timeout,
                           options.min_bytes_per_second}) {
    const bool loopback = is_loopback_host(options.host);
    if (!options.require_token && !loopback) {
      throw Error(fmt::format("the server on {} would accept uploads and deletes from anyone who reaches it; "
                              "a token is required on an address that is not loopback",
                              options.host));
    }
    if (options.token.empty()) options.token = random_token();
    host_names = {"127.0.0.1", "localhost", "[::1]"};
    if (!is_wildcard_host(options.host)) host_names.insert(host_name_of(options.host));
    for (const std::string& name : options.allowed_hosts) host_names.insert(host_name_of(name));
  }

  bool names_this_server(std::string_view text) const {
    const std::optional<HostPort> host = split_host_port(text);
    if (!host || !host_names.contains(host->name)) return false;
    return host->port ? *host->port == port : port == 80;
  }

  bool token_required(const httplib::Request& request) const {
    if (!options.require_token) return false;
    return is_state_changing(request.method) || (!is_loopback_host(options.host) && request.path.starts_with("/api/"));
  }

  // What every request passes before routing, so nothing is read or done for one that fails: Host,
  // Origin and token checks, and no body except on an upload. Throws RequestError.
  void admit(const httplib::Request& request) const {
    const std::string host = request.get_header_value("Host");
    if (!names_this_server(host)) {
      throw RequestError(403, fmt::format("Host '{}' does not name this server (it answers to {} on port {}); open "
                                          "the URL `sightline serve` printed, or restart it with --allow-host NAME",
                                          host, fmt::join(host_names, ", "), port));
    }
    if (is_state_changing(request.method) && request.has_header("Origin")) {
      const std::string origin = request.get_header_value("Origin");
      const bool same_site = origin.starts_with("http://") && names_this_server(std::string_view(origin).substr(7));
      if (!same_site) {
        throw RequestError(403, fmt::format("cross-origin {} refused: the request comes from a page at '{}', not "
                                            "from the Explorer this server serves",
                                            request.method, origin));
      }
    }
    if (token_required(request)) {
      const std::string sent = request.has_header(std::string(kTokenHeader).c_str())
                                   ? request.get_header_value(std::string(kTokenHeader).c_str())
                                   : request.get_param_value("token");
      if (!same_secret(sent, options.token)) {
        throw RequestError(403, fmt::format("{} {} needs this server's token{}: open the URL `sightline serve` "
                                            "printed (it ends in ?token=...), or pass that URL or --token to "
                                            "`sightline upload`",
                                            request.method, request.path,
                                            sent.empty() ? "" : " (a wrong one was sent)"));
      }
    }
    const bool has_body = request.has_header("Transfer-Encoding") ||
                          (request.has_header("Content-Length") && request.get_header_value("Content-Length") != "0");
    if (has_body && !(request.method == "POST" && request.path == "/api/profiles")) {
      throw RequestError(400, fmt::format("{} {} takes no request body", request.method, request.path));
    }
  }

  std::string upload_limit_message() const {
    return fmt::format("the request body is larger than this server's upload limit of {:g} MB ({} bytes); "
                       "restart `sightline serve` with a larger --max-upload-mb",
                       static_cast<double>(options.max_upload_bytes) / (1 << 20), options.max_upload_bytes);
  }

  // The multipart upload, streamed part by part into the store's staging directory: the bytes
  // counted are those after any Content-Encoding is undone, whether the body came with a
  // Content-Length or chunked, so neither a chunked nor a compressed body gets past max_upload_bytes,
  // and memory holds one chunk, not the upload. The name is checked (400, 409) before the body is read.
  json receive_upload(const httplib::Request& request, httplib::Response& response,
                      const httplib::ContentReader& content_reader) {
    if (!request.has_param("name") || request.get_param_value("name").empty()) {
      throw RequestError(400, "query parameter 'name' (the new profile's name) is required");
    }
    if (!request.is_multipart_form_data()) {
      throw RequestError(400, "an upload is a multipart/form-data body with one 'file' part per file");
    }
    std::unique_ptr<UploadStaging> staging = store.begin_upload(request.get_param_value("name"));
    uint64_t received = 0;
    size_t parts = 0;
    bool over_limit = false;
    std::exception_ptr refused;  // thrown by the staging; carried past cpp-httplib's reader
    const bool complete = content_reader(
        // After a refusal the rest of the body is still read, and dropped (within the limit), so the
        // client gets the answer rather than a connection reset for unread bytes.
        [&](const httplib::MultipartFormData& part) {
          if (over_limit || refused) return true;
          try {
            if (part.name != "file") {
              throw RequestError(400, fmt::format("unexpected form field '{}': send every file as a 'file' part",
                                                  part.name));
            }
            if (++parts > kMaxUploadParts) {
              throw RequestError(400, fmt::format("an upload holds at most {} files", kMaxUploadParts));
            }
            staging->begin_file(part.filename);
            return true;
          } catch (...) {
            refused = std::current_exception();
            return true;
          }
        },
        [&](const char* data, size_t size) {
          received += size;
          if (received > options.max_upload_bytes) {
            over_limit = true;
            return received - options.max_upload_bytes <= kDrainPastLimit;
          }
          if (refused) return true;
          try {
            staging->append(std::string_view(data, size));
          } catch (...) {
            refused = std::current_exception();
          }
          return true;
        });
    if (!complete) response.set_header("Connection", "close");  // the rest of the body is not read
    if (over_limit || response.status == 413) throw RequestError(413, upload_limit_message());
    if (refused) std::rethrow_exception(refused);
    if (!complete && current_stream != nullptr && current_stream->timed_out()) {
      throw RequestError(408, fmt::format("the upload body arrived too slowly: a request has {} s for its headers, "
                                          "then its body must arrive at {} KiB/s or more, and at most {} s in all",
                                          options.header_timeout.count() / 1000.0,
                                          options.min_bytes_per_second / 1024,
                                          options.request_timeout.count() / 1000.0));
    }
    if (!complete) {
      throw RequestError(400, "the upload body could not be read: the connection closed early or the multipart "
                              "body is malformed");
    }
    response.status = -1;  // read_content may have set it; the handler's answer decides
    UploadOptions upload_options;
    if (request.has_param("device")) upload_options.device = request.get_param_value("device");
    return store.finish_upload(std::move(staging), upload_options);
  }

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

  // The API, the limits on connections, then what answers everything else.
  void add_routes() {
    add_timeline_routes();
    add_analysis_routes();
    add_write_routes();
    limit_connections();
    add_fallbacks();
  }

  // The profile list and what the timeline asks: lanes, windows of events, one event, search.
  void add_timeline_routes() {
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
          const size_t offset = optional_unsigned(request, "offset", 0);
          send_json(response, profile->search(request.get_param_value("q"), limit, offset));
        }));
  }

  // The tables and summaries: key averages, one device execution, SQL, the summary, compare.
  void add_analysis_routes() {
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
    http.Get(R"(/api/profiles/([^/]+)/query)",
             guarded([this](const httplib::Request& request, auto& response) {
               send_json(response, store.query(request.matches[1].str(), request.get_param_value("sql")));
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
  }

  // Upload and delete (the pre-routing check has already asked for the token and the origin).
  void add_write_routes() {
    http.Post("/api/profiles", [this](const httplib::Request& request, httplib::Response& response,
                                      const httplib::ContentReader& content_reader) {
      guarded([&](const httplib::Request&, httplib::Response&) {
        send_json(response, receive_upload(request, response, content_reader), 201);
      })(request, response);
    });
    http.Delete(R"(/api/profiles/([^/]+))", guarded([this](const httplib::Request& request, auto& response) {
                  const std::string name = request.matches[1].str();
                  store.remove(name);
                  send_json(response, {{"deleted", name}});
                }));
  }

  // Admission before routing (Host, origin, token), body size, timeouts and the worker pool.
  void limit_connections() {
    http.set_payload_max_length(options.max_upload_bytes);
    http.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      try {
        admit(request);
      } catch (const RequestError& refusal) {
        response.set_header("Connection", "close");  // an unread body must not be taken for the next request
        send_json(response, {{"error", refusal.what()}}, refusal.status());
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Slow clients: each read or write waits at most io_timeout, an idle keep-alive connection is
    // closed after it too, and a pool larger than the default 8 workers keeps light requests answered
    // while some workers wait on slow clients or compute heavy windows.
    const auto timeout = options.io_timeout;
    http.set_read_timeout(timeout);
    http.set_write_timeout(timeout);
    http.set_keep_alive_timeout(std::max<time_t>(1, std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    const unsigned workers =
        options.worker_threads != 0 ? options.worker_threads : std::max(64u, 4 * std::thread::hardware_concurrency());
    http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  }

  // JSON errors for unknown endpoints and refused bodies; the built UI for every other path.
  void add_fallbacks() {
    http.set_error_handler([this](const httplib::Request& request, httplib::Response& response) {
      if (!response.body.empty()) return;
      if (response.status == 413) {
        send_json(response, {{"error", upload_limit_message()}}, 413);
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
  state_->port = port;
  return port;
}

const std::string& ExplorerServer::token() const { return state_->options.token; }

std::string ExplorerServer::url() const {
  const ServerOptions& options = state_->options;
  const std::string host = is_wildcard_host(options.host) ? "127.0.0.1" : host_name_of(options.host);
  return fmt::format("http://{}:{}/{}", host, state_->port,
                     options.require_token ? fmt::format("?token={}", options.token) : "");
}

void ExplorerServer::serve() {
  state_->serving = true;
  if (!state_->stop_requested) state_->http.listen_after_bind();
  state_->served = true;
}

void ExplorerServer::stop() {
  state_->stop_requested = true;
  if (!state_->serving) return;  // serve() has not begun and now will not
  while (!state_->http.is_running() && !state_->served) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  state_->http.stop();
}

}  // namespace sightline::server
