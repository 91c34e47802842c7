// The one XML text escaper of the analysis layer: the roofline SVG and the gate's JUnit report.
//
//   out += fmt::format("<testcase name=\"{}\"/>", analysis::xml_escape(name));
//
// Escapes the five special characters, so the result is safe in text and in attribute values of
// either quote; control characters XML 1.0 forbids (all below 0x20 but tab, LF and CR) become '?'.
#pragma once

#include <string>
#include <string_view>

namespace sightline::analysis {

std::string xml_escape(std::string_view text);

}  // namespace sightline::analysis
