// Renderings of a profile for `sightline view`: summary-text, summary-json and the full json.
//
//   ProfileDir profile = profile_dir_load("profiles/fused");
//   std::cout << analysis::report_summary_text(profile);   // "total_time_us  123.456" lines + insights
//
// summary-text and summary-json hold device-side numbers only (deterministic for a given program and
// spec, so they suit golden files); json adds per-executable summaries, the roofline, the insights
// and the key_averages rows (host times included).
#pragma once

#include <string>

#include "analysis/profile_dir.h"

namespace sightline::analysis {

std::string report_summary_text(const ProfileDir& profile);
std::string report_summary_json(const ProfileDir& profile);
std::string report_json(const ProfileDir& profile);

}  // namespace sightline::analysis
