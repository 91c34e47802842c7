// The client side of uploads (`sightline upload DIR --name NAME`): reads and checks a directory
// locally, so obvious problems are reported without a server, then posts it to a running Explorer
// server exactly as the browser does (POST /api/profiles?name=NAME, one multipart "file" part per
// file; http_server.h).
//
//   auto files = server::upload_files_from_directory("profiles/fused");   // validates first
//   nlohmann::json stored = server::upload_to_server("http://127.0.0.1:8600/?token=...", "fused", files);
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/profile_store.h"

namespace sightline::server {

// The files an upload of `dir` sends: for a profile directory (it holds manifest.json), the manifest
// and every file it lists, after analysis::profile_dir_load accepted the directory; otherwise the one
// neff_<hash>.neff and the one .ntff in it, after both loaded and were checked to pair. Throws
// sightline::Error naming the file and the problem.
std::vector<UploadFile> upload_files_from_directory(const std::filesystem::path& dir);

// Posts `files` as profile `name` to the server at `server_url` and returns its answer ({"uploaded",
// "files", "bytes"}). `server_url` is "http://127.0.0.1:8600" or the URL `sightline serve` printed,
// "http://127.0.0.1:8600/?token=..."; the server's write token is `token` when not empty, else the
// one in the URL. Throws sightline::Error when no server answers (saying how to start one) or when
// the server refuses the upload (with its message).
nlohmann::json upload_to_server(const std::string& server_url, std::string_view name,
                                const std::vector<UploadFile>& files, const std::string& token = {});

}  // namespace sightline::server
