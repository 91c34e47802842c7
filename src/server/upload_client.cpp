#include "server/upload_client.h"

#include <fmt/format.h>
#include <httplib.h>

#include <fstream>
#include <sstream>

#include "analysis/profile_dir.h"
#include "formats/manifest.h"
#include "formats/neff.h"
#include "formats/ntff.h"
#include "server/http_server.h"
#include "sightline/error.h"

namespace sightline::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

UploadFile read_upload_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SIGHTLINE_CHECK(in.good(), "cannot read '{}'; check that it exists and is readable", path.string());
  std::ostringstream content;
  content << in.rdbuf();
  return {path.filename().string(), std::move(content).str()};
}

std::string percent_encoded(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                       c == '_' || c == '.' || c == '~';
    out += plain ? std::string(1, c) : fmt::format("%{:02X}", static_cast<unsigned char>(c));
  }
  return out;
}

// "http://host:port/path?token=T" -> ("http://host:port", "T"): httplib's client takes only the first.
std::pair<std::string, std::string> split_server_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const size_t path_at = url.find_first_of("/?#", scheme_end == std::string::npos ? 0 : scheme_end + 3);
  if (path_at == std::string::npos) return {url, {}};
  std::string token;
  const size_t query_at = url.find('?', path_at);
  if (query_at != std::string::npos) {
    std::string_view query = std::string_view(url).substr(query_at + 1);
    query = query.substr(0, query.find('#'));
    while (!query.empty()) {
      const std::string_view pair = query.substr(0, query.find('&'));
      if (pair.starts_with("token=")) token = std::string(pair.substr(6));
      query = pair.size() == query.size() ? std::string_view{} : query.substr(pair.size() + 1);
    }
  }
  return {url.substr(0, path_at), token};
}

}  // namespace

std::vector<UploadFile> upload_files_from_directory(const fs::path& dir) {
  std::error_code error;
  SIGHTLINE_CHECK(fs::is_directory(dir, error),
                  "'{}' is not a directory; pass a profile output directory or a directory holding one "
                  "neff_<hash>.neff and its .ntff",
                  dir.string());
  std::vector<UploadFile> files;
  if (fs::exists(dir / formats::kManifestFileName, error)) {
    const analysis::ProfileDir profile = analysis::profile_dir_load(dir.string());
    files.push_back(read_upload_file(dir / formats::kManifestFileName));
    for (const formats::ManifestFile& file : profile.manifest.files) {
      SIGHTLINE_CHECK(file.path.find('/') == std::string::npos,
                      "'{}' lists '{}' in a subdirectory; uploads hold the files of one flat profile directory",
                      (dir / formats::kManifestFileName).string(), file.path);
      files.push_back(read_upload_file(dir / file.path));
    }
    return files;
  }
  std::vector<fs::path> neffs, ntffs;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    if (entry.path().extension() == ".neff") neffs.push_back(entry.path());
    if (entry.path().extension() == ".ntff") ntffs.push_back(entry.path());
  }
  SIGHTLINE_CHECK(neffs.size() == 1 && ntffs.size() == 1,
                  "'{}' has no manifest.json and is not an executable + instruction-trace pair ({} .neff and {} "
                  ".ntff files; a pair is exactly one of each); pass a profile output directory",
                  dir.string(), neffs.size(), ntffs.size());
  const device::Executable exe = formats::neff_load(neffs.front().string());
  const formats::NtffTrace trace = formats::ntff_load(ntffs.front().string());
  SIGHTLINE_CHECK(trace.neff_hash == formats::neff_hash(exe) &&
                      neffs.front().filename().string() == formats::neff_file_name(exe),
                  "'{}' is not the instruction trace of '{}' (it pairs with {})", ntffs.front().string(),
                  neffs.front().string(), formats::ntff_paired_neff_file_name(trace.neff_hash));
  files.push_back(read_upload_file(neffs.front()));
  files.push_back(read_upload_file(ntffs.front()));
  return files;
}

json upload_to_server(const std::string& url, std::string_view name, const std::vector<UploadFile>& files,
                      const std::string& token) {
  const auto [server_url, url_token] = split_server_url(url);
  httplib::Client client(server_url);
  SIGHTLINE_CHECK(client.is_valid(), "'{}' is not a server address; use the form http://127.0.0.1:8600",
                  server_url);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::minutes(10));  // a large profile is validated before the answer
  client.set_write_timeout(std::chrono::minutes(10));
  const std::string& write_token = token.empty() ? url_token : token;
  if (!write_token.empty()) client.set_default_headers({{std::string(kTokenHeader), write_token}});
  httplib::MultipartFormDataItems items;
  for (const UploadFile& file : files) {
    items.push_back({"file", file.content, file.name, "application/octet-stream"});
  }
  const httplib::Result result = client.Post(fmt::format("/api/profiles?name={}", percent_encoded(name)), items);
  if (!result) {
    const bool refused = result.error() == httplib::Error::Connection;
    fail("{} at {} ({}); start one with `sightline serve DIR`",
         refused ? "no Explorer server is listening" : "the Explorer server did not answer", server_url,
         httplib::to_string(result.error()));
  }
  json body;
  try {
    body = json::parse(result->body);
  } catch (const json::exception&) {
    fail("the server at {} answered {} with a body that is not JSON; is it a sightline Explorer server?",
         server_url, result->status);
  }
  if (result->status != 201) {
    const std::string message = body.is_object() && body.contains("error") && body["error"].is_string()
                                    ? body["error"].get<std::string>()
                                    : result->body;
    fail("the server refused the upload (HTTP {}): {}", result->status, message);
  }
  return body;
}

}  // namespace sightline::server
