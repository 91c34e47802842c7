#include "progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace sightline::tools {
namespace {

// Below this a read finishes before a bar would be noticed.
constexpr uint64_t kMinBytesForBar = 8u << 20;
constexpr int kBarWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), enabled_(::isatty(STDERR_FILENO) == 1) {}

analysis::ProgressCallback ProgressBar::callback() {
  if (!enabled_) return {};
  return [this](uint64_t done, uint64_t total) { update(done, total); };
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_ || total < kMinBytesForBar) return;
  const int percent = static_cast<int>(100 * done / total);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  const int filled = percent * kBarWidth / 100;
  fmt::print(stderr, "\r{} [{}{}] {:3}% of {} MiB", label_, std::string(static_cast<size_t>(filled), '#'),
             std::string(static_cast<size_t>(kBarWidth - filled), ' '), percent, total >> 20);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  fmt::print(stderr, "\n");
  drawn_ = false;
}

}  // namespace sightline::tools
