// What a hostile web page, a hostile client or a slow one can do to `sightline serve` on 127.0.0.1
// (issue 21): a Host that is not this server's is refused (DNS rebinding), writes need the per-run
// token and a same-origin page (CSRF), one GET does bounded work, an upload's body is bounded after
// decoding whatever its transfer or content encoding, slow clients do not hold every worker, and an
// answer quoting invalid UTF-8 is still JSON.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sightline/device/spec.h"
#include "formats/manifest.h"
#include "server/http_server.h"
#include "server/profile_index.h"
#include "server/profile_store.h"
#include "sightline/error.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kToken = "test-token-0123456789";

// One framework lane holding `events` back-to-back 1 us events.
std::string small_trace(int events) {
  json list = json::array();
  list.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", 1}, {"ts", 0},
                  {"args", {{"name", "host/1/framework/TID:0"}}}});
  for (int i = 0; i < events; ++i) {
    list.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mul"}, {"pid", 1}, {"tid", 1},
                    {"ts", i}, {"dur", 1}, {"args", json::object()}});
  }
  return json{{"traceEvents", list}}.dump();
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("sightline_security_test_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    write_profile("good", small_trace(100));
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      serving_.join();
    }
    fs::remove_all(root_);
  }

  void write_profile(const std::string& name, const std::string& trace_text) {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    std::ofstream(dir / "trace.json") << trace_text;
    formats::Manifest manifest;
    manifest.created_utc = formats::manifest_now_utc();
    manifest.device = device::Spec::builtin("trn2");
    manifest.files = {
        {formats::ManifestFileKind::trace, "trace.json", std::nullopt, std::nullopt, trace_text.size()}};
    formats::manifest_save(manifest, dir.string());
  }

  // A server on 127.0.0.1 and a client that sends nothing but what each test adds.
  httplib::Client& start(ServerOptions options = {}) {
    options.profile_root = root_;
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.token.empty()) options.token = kToken;
    server_ = std::make_unique<ExplorerServer>(options);
    port_ = server_->bind();
    serving_ = std::thread([this] { server_->serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_connection_timeout(std::chrono::seconds(5));
    client_->set_read_timeout(std::chrono::seconds(30));
    return *client_;
  }

  static std::string error_of(const httplib::Result& result) {
    if (!result) return "(no answer)";
    const json body = json::parse(result->body);  // every refusal is JSON
    return body.value("error", std::string("(no error field)"));
  }

  fs::path root_;
  int port_ = 0;
  std::unique_ptr<ExplorerServer> server_;
  std::thread serving_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(SecurityTest, HostMustNameThisServer) {
  ServerOptions options;
  options.allowed_hosts = {"Workstation.example"};
  httplib::Client& client = start(options);
  auto with_host = [&](const std::string& host) {
    return client.Get("/api/profiles", {{"Host", host}});
  };
  for (const std::string& host : {fmt::format("127.0.0.1:{}", port_), fmt::format("localhost:{}", port_),
                                 fmt::format("[::1]:{}", port_), fmt::format("workstation.example:{}", port_)}) {
    auto answer = with_host(host);
    ASSERT_TRUE(answer) << host;
    EXPECT_EQ(answer->status, 200) << host << ": " << answer->body;
  }
  // A page that rebinds its own name to 127.0.0.1 still sends that name; another port is another server.
  for (const std::string& host : {fmt::format("attacker.example:{}", port_), std::string("attacker.example"),
                                 fmt::format("127.0.0.1:{}", port_ + 1), std::string("127.0.0.1"),
                                 std::string("127.0.0.1:x"), std::string("[::1"), std::string("")}) {
    auto refused = with_host(host);
    ASSERT_TRUE(refused) << host;
    EXPECT_EQ(refused->status, 403) << host;
    EXPECT_NE(error_of(refused).find("does not name this server"), std::string::npos) << error_of(refused);
  }
  // Static files too: a rebinding page must not read the UI's files either.
  auto page = client.Get("/index.html", {{"Host", "attacker.example"}});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 403);
}

TEST_F(SecurityTest, WritesNeedTheTokenAndASameOriginPage) {
  httplib::Client& client = start();
  const std::string url = server_->url();
  EXPECT_EQ(url, fmt::format("http://127.0.0.1:{}/?token={}", port_, kToken));

  // No token, a wrong one, or the right one from a page of another site: refused, nothing deleted.
  auto no_token = client.Delete("/api/profiles/good");
  ASSERT_TRUE(no_token);
  EXPECT_EQ(no_token->status, 403);
  EXPECT_NE(error_of(no_token).find("token"), std::string::npos) << error_of(no_token);
  auto wrong = client.Delete("/api/profiles/good", {{std::string(kTokenHeader), "guess"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 403);
  auto cross_origin = client.Delete("/api/profiles/good", {{std::string(kTokenHeader), kToken},
                                                            {"Origin", "http://attacker.example"}});
  ASSERT_TRUE(cross_origin);
  EXPECT_EQ(cross_origin->status, 403);
  EXPECT_NE(error_of(cross_origin).find("cross-origin"), std::string::npos) << error_of(cross_origin);
  for (const char* origin : {"null", "https://127.0.0.1", "http://127.0.0.1:1"}) {
    auto refused = client.Delete("/api/profiles/good", {{std::string(kTokenHeader), kToken}, {"Origin", origin}});
    ASSERT_TRUE(refused) << origin;
    EXPECT_EQ(refused->status, 403) << origin;
  }
  EXPECT_TRUE(fs::exists(root_ / "good"));

  // A hostile page's form post (a CORS simple request: multipart, no custom header) stores nothing.
  const httplib::MultipartFormDataItems parts = {{"file", "{}", "manifest.json", ""}};
  auto csrf = client.Post("/api/profiles?name=planted", {{"Origin", "http://attacker.example"}}, parts);
  ASSERT_TRUE(csrf);
  EXPECT_EQ(csrf->status, 403);
  auto tokenless = client.Post("/api/profiles?name=planted", parts);
  ASSERT_TRUE(tokenless);
  EXPECT_EQ(tokenless->status, 403);
  EXPECT_FALSE(fs::exists(root_ / "planted"));

  // Reads on loopback need no token; the Explorer's own page deletes with the token, as the header
  // or the query parameter.
  auto listing = client.Get("/api/profiles");
  ASSERT_TRUE(listing);
  EXPECT_EQ(listing->status, 200);
  write_profile("second", small_trace(3));
  auto by_header = client.Delete("/api/profiles/good", {{std::string(kTokenHeader), kToken},
                                                         {"Origin", fmt::format("http://127.0.0.1:{}", port_)}});
  ASSERT_TRUE(by_header);
  EXPECT_EQ(by_header->status, 200) << by_header->body;
  auto by_query = client.Delete(fmt::format("/api/profiles/second?token={}", kToken),
                                {{"Origin", fmt::format("http://localhost:{}", port_)}});
  ASSERT_TRUE(by_query);
  EXPECT_EQ(by_query->status, 200) << by_query->body;
  EXPECT_FALSE(fs::exists(root_ / "good"));
  EXPECT_FALSE(fs::exists(root_ / "second"));
}

TEST_F(SecurityTest, ATokenIsMadePerRunAndCannotBeTurnedOffOffLoopback) {
  ServerOptions a{.profile_root = root_};
  ServerOptions b{.profile_root = root_};
  ExplorerServer first(a), second(b);
  EXPECT_GE(first.token().size(), 32u);
  EXPECT_NE(first.token(), second.token());
  ServerOptions open_network{.profile_root = root_, .static_dir = {}, .host = "0.0.0.0"};
  open_network.require_token = false;
  EXPECT_THROW(ExplorerServer{open_network}, Error);
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("192.168.1.2"));
  EXPECT_TRUE(is_loopback_host("127.0.0.2"));
  EXPECT_FALSE(is_loopback_host("127.0.0.1.attacker.example"));  // a name, resolved anywhere
}

TEST_F(SecurityTest, RepeatedLanesAreAnsweredOnceAndLargeWindowsAreRefused) {
  httplib::Client& client = start();
  std::string lanes = "0";
  for (int i = 0; i < 1000; ++i) lanes += ",0";
  auto window = client.Get(fmt::format("/api/profiles/good/events?start=0&end=100&width=1000&lanes={}", lanes));
  ASSERT_TRUE(window);
  ASSERT_EQ(window->status, 200) << window->body;
  const json answer = json::parse(window->body);
  EXPECT_EQ(answer["lanes"].size(), 1u);
  EXPECT_EQ(answer["event_count"], 100u);

  auto profile = ProfileIndex::load(root_ / "good");
  WindowQuery query{.start_us = 0, .end_us = 100, .lanes = {0, 0, 0}, .width_px = 1000, .max_entries = 10};
  try {
    profile->window(query);
    ADD_FAILURE() << "a window over max_entries was answered";
  } catch (const RequestError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_NE(std::string(error.what()).find("fewer lanes"), std::string::npos) << error.what();
  }
  query.max_entries = 100;
  EXPECT_EQ(profile->window(query)["event_count"], 100u);
}

// A multipart body with one "file" part of `size` zero bytes.
std::string multipart_body(const std::string& boundary, size_t size) {
  return fmt::format("--{0}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"trace.json\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n{1}\r\n--{0}--\r\n",
                     boundary, std::string(size, '\0'));
}

TEST_F(SecurityTest, UploadLimitHoldsForChunkedAndCompressedBodies) {
  ServerOptions options;
  options.max_upload_bytes = 64 << 10;
  httplib::Client& client = start(options);
  client.set_default_headers({{std::string(kTokenHeader), kToken}});
  const std::string boundary = "sightline-test-boundary";
  const std::string body = multipart_body(boundary, 4 << 20);  // 4 MiB: 64 times the limit

  // Chunked: no Content-Length for the limit to be checked against.
  size_t sent = 0;
  auto chunked = client.Post(
      "/api/profiles?name=chunked",
      [&](size_t, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(body.size() - sent, 16 << 10);
        if (n == 0) {
          sink.done();
          return true;
        }
        sink.write(body.data() + sent, n);
        sent += n;
        return true;
      },
      fmt::format("multipart/form-data; boundary={}", boundary));
  ASSERT_TRUE(chunked) << httplib::to_string(chunked.error());
  EXPECT_EQ(chunked->status, 413) << chunked->body;
  EXPECT_NE(error_of(chunked).find("--max-upload-mb"), std::string::npos) << error_of(chunked);

  // gzip: a few KiB on the wire that expand to 4 MiB.
  client.set_compress(true);
  auto compressed = client.Post("/api/profiles?name=compressed", body,
                                fmt::format("multipart/form-data; boundary={}", boundary));
  ASSERT_TRUE(compressed) << httplib::to_string(compressed.error());
  EXPECT_EQ(compressed->status, 413) << compressed->body;
  client.set_compress(false);
  EXPECT_FALSE(fs::exists(root_ / "chunked"));
  EXPECT_FALSE(fs::exists(root_ / "compressed"));

  // No other request may carry a body (cpp-httplib would read it whole before routing); refused
  // unread, so a large one may see the connection closed rather than this answer.
  httplib::Client other("127.0.0.1", port_);
  other.set_default_headers({{std::string(kTokenHeader), kToken}});
  auto with_body = other.Post("/api/elsewhere", std::string(1 << 10, 'x'), "text/plain");
  ASSERT_TRUE(with_body);
  EXPECT_EQ(with_body->status, 400);
  EXPECT_NE(error_of(with_body).find("takes no request body"), std::string::npos) << error_of(with_body);
}

// A raw connection to 127.0.0.1:port.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST_F(SecurityTest, SlowClientsDoNotHoldEveryWorker) {
  httplib::Client& client = start();
  // 24 clients that send a header line every 200 ms and never finish (more than cpp-httplib's
  // default 8 workers), for as long as the light request below takes.
  std::vector<int> slow;
  for (int i = 0; i < 24; ++i) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    const std::string start_line = fmt::format("GET /api/profiles HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", port_);
    ASSERT_EQ(::send(fd, start_line.data(), start_line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start_line.size()));
    slow.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::thread drip([&] {
    while (!done) {
      for (int fd : slow) (void)::send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  client.set_read_timeout(std::chrono::seconds(3));
  const auto before = std::chrono::steady_clock::now();
  auto light = client.Get("/api/profiles");
  const auto waited = std::chrono::steady_clock::now() - before;
  done = true;
  drip.join();
  for (int fd : slow) ::close(fd);
  ASSERT_TRUE(light) << "no answer while slow clients were connected";
  EXPECT_EQ(light->status, 200);
  EXPECT_LT(waited, std::chrono::seconds(2));
}

TEST_F(SecurityTest, AClientThatStopsSendingIsDisconnected) {
  ServerOptions options;
  options.io_timeout = std::chrono::milliseconds(300);
  start(options);
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  const std::string partial = "GET /api/profiles HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  ASSERT_GT(::send(fd, partial.data(), partial.size(), MSG_NOSIGNAL), 0);
  timeval wait{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  // The server may answer the unfinished request (cpp-httplib sends 400) before it closes.
  const auto before = std::chrono::steady_clock::now();
  char buffer[256];
  ssize_t got = 0;
  while ((got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
  }
  const auto waited = std::chrono::steady_clock::now() - before;
  ::close(fd);
  EXPECT_EQ(got, 0) << "the server kept the stalled connection open";
  EXPECT_LT(waited, std::chrono::seconds(3));
}

// Slowloris: per-read timeouts never fire for a client that sends a byte every 200 ms, so before the
// whole-request deadline these three held all three workers for as long as they kept sending, and the
// light request below was never answered.
TEST_F(SecurityTest, ASlowRequestIsCutOffAtItsDeadlineWhateverItSends) {
  ServerOptions options;
  options.worker_threads = 3;
  options.header_timeout = std::chrono::seconds(2);
  options.request_timeout = std::chrono::seconds(4);
  httplib::Client& client = start(options);
  const std::string boundary = "sightline-slow-boundary";
  const std::vector<std::string> openings = {
      // Headers that never end: one more header byte at a time.
      fmt::format("GET /api/profiles HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Slow: ", port_),
      fmt::format("GET /api/profiles/good/lanes HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Slow: ", port_),
      // An upload whose headers are complete and whose body comes a byte at a time.
      fmt::format("POST /api/profiles?name=slow HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{}: {}\r\n"
                  "Content-Type: multipart/form-data; boundary={}\r\nContent-Length: 1000000\r\n\r\n"
                  "--{}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"trace.json\"\r\n\r\n",
                  port_, kTokenHeader, kToken, boundary, boundary)};
  struct Slow {
    int fd;
    std::optional<std::chrono::steady_clock::duration> closed_after;
  };
  std::vector<Slow> slow;
  const auto started = std::chrono::steady_clock::now();
  for (const std::string& opening : openings) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, opening.data(), opening.size(), MSG_NOSIGNAL), static_cast<ssize_t>(opening.size()));
    slow.push_back({fd, std::nullopt});
  }
  std::thread drip([&] {
    char buffer[4096];
    while (std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
      for (Slow& one : slow) {
        if (one.closed_after) continue;
        // Whatever the server answers is read; the end of the stream (or a reset) is the cut-off.
        pollfd entry{.fd = one.fd, .events = POLLIN, .revents = 0};
        bool closed = false;
        while (::poll(&entry, 1, 0) > 0) {
          const ssize_t got = ::recv(one.fd, buffer, sizeof buffer, MSG_DONTWAIT);
          if (got > 0) continue;
          closed = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
          break;
        }
        if (!closed && ::send(one.fd, "x", 1, MSG_NOSIGNAL) != 1) closed = true;
        if (closed) one.closed_after = std::chrono::steady_clock::now() - started;
      }
      if (std::all_of(slow.begin(), slow.end(), [](const Slow& one) { return one.closed_after.has_value(); })) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // With every worker taken by a slow client, the light request waits for the first cut-off.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  client.set_read_timeout(std::chrono::seconds(10));
  auto light = client.Get("/api/profiles");
  const auto light_after = std::chrono::steady_clock::now() - started;
  // The drip loop ends once it has seen all three cut-offs, or at 10 s (a fixed wait here failed under
  // TSan on a loaded 2-core machine, where a cut-off came later than the light request plus a second).
  drip.join();
  for (const Slow& one : slow) ::close(one.fd);
  ASSERT_TRUE(light) << "the light request got no answer while slow clients held every worker";
  EXPECT_EQ(light->status, 200);
  EXPECT_LT(light_after, std::chrono::seconds(10));
  for (size_t i = 0; i < slow.size(); ++i) {
    ASSERT_TRUE(slow[i].closed_after) << "slow client " << i << " was still connected after 10 s";
    EXPECT_LT(*slow[i].closed_after, std::chrono::seconds(10)) << "slow client " << i;
  }
  EXPECT_FALSE(fs::exists(root_ / "slow"));
}

// The deadline is per request, not per connection: a keep-alive client that sends its requests
// promptly is served past the deadline of its first one.
TEST_F(SecurityTest, PromptRequestsOnOneConnectionAreServedPastOneDeadline) {
  ServerOptions options;
  options.header_timeout = std::chrono::milliseconds(500);
  options.request_timeout = std::chrono::seconds(1);
  httplib::Client& client = start(options);
  client.set_keep_alive(true);
  for (int i = 0; i < 4; ++i) {
    auto answer = client.Get("/api/profiles/good/lanes");
    ASSERT_TRUE(answer) << i;
    EXPECT_EQ(answer->status, 200) << answer->body;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
}

TEST_F(SecurityTest, ADamagedManifestWithInvalidUtf8IsListedAsBroken) {
  fs::create_directories(root_ / "damaged");
  std::ofstream(root_ / "damaged" / "manifest.json", std::ios::binary) << "{\"format_version\": \xff\xfe}";
  httplib::Client& client = start();
  auto listing = client.Get("/api/profiles");
  ASSERT_TRUE(listing);
  ASSERT_EQ(listing->status, 200) << listing->body;
  const json body = json::parse(listing->body);
  ASSERT_EQ(body["profiles"].size(), 2u);
  EXPECT_EQ(body["profiles"][0]["name"], "damaged");
  EXPECT_FALSE(body["profiles"][0]["ok"].get<bool>());
  EXPECT_NE(body["profiles"][0]["error"].get<std::string>().find("manifest"), std::string::npos);
  EXPECT_TRUE(body["profiles"][1]["ok"].get<bool>());
  // Its error answer is JSON too.
  auto opened = client.Get("/api/profiles/damaged/lanes");
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->status, 422) << opened->body;
  EXPECT_FALSE(error_of(opened).empty());
}

}  // namespace
}  // namespace sightline::server
