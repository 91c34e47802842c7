// sightline-serve: the Explorer over a directory of profiles.
//
//   sightline-serve [DIR] [--port N] [--host 127.0.0.1] [--ui DIR]
//
// DIR holds one profile output directory per subdirectory (default: the current directory).
// --port 0 picks a free port; the first line printed names the URL to open.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>

#include "server/http_server.h"

namespace {

constexpr int kDefaultPort = 8600;

void print_usage(std::FILE* out) {
  fmt::print(out,
             "usage: sightline-serve [DIR] [--port N] [--host ADDRESS] [--ui DIR]\n"
             "  DIR        directory of profile output directories (default: .)\n"
             "  --port N   port to listen on (default {}; 0 picks a free one)\n"
             "  --host A   address to bind (default 127.0.0.1)\n"
             "  --ui DIR   the built Explorer UI (default: $SIGHTLINE_EXPLORER_DIST or the source tree's "
             "explorer/dist)\n",
             kDefaultPort);
}

std::filesystem::path default_ui_dir() {
  if (const char* from_environment = std::getenv("SIGHTLINE_EXPLORER_DIST")) return from_environment;
  return SIGHTLINE_EXPLORER_DIST;
}

}  // namespace

int main(int argc, char** argv) {
  sightline::server::ServerOptions options;
  options.profile_root = ".";
  options.port = kDefaultPort;
  options.static_dir = default_ui_dir();
  bool root_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto next_value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fmt::print(stderr, "sightline-serve: {} needs a value\n", arg);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      return 0;
    } else if (arg == "--port") {
      const std::string value = next_value();
      char* end = nullptr;
      const long port = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || port < 0 || port > 65535) {
        fmt::print(stderr, "sightline-serve: --port {} is not a port number (0-65535)\n", value);
        return 2;
      }
      options.port = static_cast<int>(port);
    } else if (arg == "--host") {
      options.host = next_value();
    } else if (arg == "--ui") {
      options.static_dir = next_value();
    } else if (!arg.starts_with("-") && !root_given) {
      options.profile_root = std::string(arg);
      root_given = true;
    } else {
      fmt::print(stderr, "sightline-serve: unknown argument '{}'\n", arg);
      print_usage(stderr);
      return 2;
    }
  }

  // SIGINT/SIGTERM are taken by a watcher thread that stops the server cleanly.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    sightline::server::ExplorerServer server(options);
    const int port = server.bind();
    if (!std::filesystem::is_directory(options.static_dir)) {
      fmt::print(stderr,
                 "sightline-serve: no built UI at '{}' (run scripts/explorer.sh); serving the API only\n",
                 options.static_dir.string());
    }
    fmt::print("sightline Explorer: http://{}:{}/ serving profiles from {}\n", options.host, port,
               std::filesystem::absolute(options.profile_root).lexically_normal().string());
    std::fflush(stdout);
    std::thread watcher([&server, stop_signals] {
      int received = 0;
      sigwait(&stop_signals, &received);
      server.stop();
    });
    server.serve();
    // serve() also returns when listening fails; wake the watcher so the process can exit.
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
  } catch (const std::exception& error) {
    fmt::print(stderr, "sightline-serve: {}\n", error.what());
    return 1;
  }
  return 0;
}
