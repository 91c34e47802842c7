// A progress bar on stderr for long reads, drawn only when stderr is a terminal (so logs and pipes
// stay clean) and only for inputs large enough to take a moment.
//
//   ProgressBar bar("reading trace.json");
//   profile_dir_load(dir, {.progress = bar.callback()});
//   bar.finish();
#pragma once

#include <cstdint>
#include <string>

#include "analysis/profile_dir.h"

namespace sightline::tools {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Empty when stderr is not a terminal, so callers pay nothing then.
  analysis::ProgressCallback callback();
  void update(uint64_t done, uint64_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_ = false;
  bool drawn_ = false;
  int last_percent_ = -1;
};

}  // namespace sightline::tools
