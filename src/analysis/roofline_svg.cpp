// The roofline chart as a standalone SVG (no script, no external resources), see roofline.h.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "analysis/roofline.h"
#include "analysis/xml.h"
#include "sightline/error.h"

namespace sightline::analysis {
namespace {

constexpr double kWidth = 860, kHeight = 560;
constexpr double kLeft = 90, kRight = 250, kTop = 40, kBottom = 70;  // the right margin holds the legend
constexpr double kMaxRadius = 22, kMinRadius = 4;
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string si(double value, std::string_view unit) {
  static const char* const prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int index = 0;
  while (std::abs(value) >= 1000 && index < 6) {
    value /= 1000;
    ++index;
  }
  return fmt::format("{:g} {}{}", value, prefixes[index], unit);
}

struct LogAxis {
  double low_decade = 0, high_decade = 1;  // log10 bounds
  double from = 0, to = 1;                 // pixels

  double at(double value) const {
    const double v = std::log10(std::max(value, std::pow(10.0, low_decade)));
    return from + (v - low_decade) / (high_decade - low_decade) * (to - from);
  }
};

LogAxis axis_covering(double low, double high, double from, double to) {
  LogAxis axis;
  axis.low_decade = std::floor(std::log10(low));
  axis.high_decade = std::ceil(std::log10(high));
  if (axis.high_decade <= axis.low_decade) axis.high_decade = axis.low_decade + 1;
  axis.from = from;
  axis.to = to;
  return axis;
}

}  // namespace

std::string roofline_svg(const Roofline& roof) {
  // Axis ranges: every point, the ridge, and the roof a decade either side of the ridge.
  double x_low = roof.ridge_point / 100, x_high = roof.ridge_point * 10;
  double y_low = roof.peak_flops_per_s / 1e4, y_high = roof.peak_flops_per_s * 2;
  double total_time = 0;
  for (const RooflinePoint& p : roof.ops) {
    if (p.intensity > 0) x_low = std::min(x_low, p.intensity / 2), x_high = std::max(x_high, p.intensity * 2);
    if (p.achieved_flops_per_s > 0) y_low = std::min(y_low, p.achieved_flops_per_s / 2);
    total_time += p.time_ns;
  }
  const LogAxis x = axis_covering(x_low, x_high, kLeft, kWidth - kRight);
  const LogAxis y = axis_covering(y_low, y_high, kHeight - kBottom, kTop);

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  svg += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Roofline ({}, HBM level)</text>\n",
                     kLeft, xml_escape(roof.device));
  // Grid, ticks and labels at every decade.
  for (double d = x.low_decade; d <= x.high_decade; ++d) {
    const double px = x.at(std::pow(10.0, d));
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e6e6e6\"/>\n", px, y.from, y.to);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>\n", px, y.from,
                       y.from + 5);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px, y.from + 18,
                       si(std::pow(10.0, d), ""));
  }
  for (double d = y.low_decade; d <= y.high_decade; ++d) {
    const double py = y.at(std::pow(10.0, d));
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e6e6e6\"/>\n", x.from, py, x.to);
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"black\"/>\n", x.from - 5, py,
                       x.from);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", x.from - 8, py + 4,
                       si(std::pow(10.0, d), "FLOP/s"));
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", x.from,
                     y.to, x.to - x.from, y.from - y.to);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">Arithmetic intensity (FLOP per HBM byte, "
                     "log scale)</text>\n", (x.from + x.to) / 2, kHeight - 25);
  svg += fmt::format("<text transform=\"translate(20 {:.1f}) rotate(-90)\" text-anchor=\"middle\">Achieved FLOP/s "
                     "(log scale)</text>\n", (y.from + y.to) / 2);

  // Ceilings: bandwidth slope up to the ridge, then the compute roof.
  const double x_start = std::pow(10.0, x.low_decade), x_end = std::pow(10.0, x.high_decade);
  const double slope_start_y = std::max(x_start * roof.hbm_bytes_per_s, std::pow(10.0, y.low_decade));
  const double slope_start_x = slope_start_y / roof.hbm_bytes_per_s;
  svg += fmt::format("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2.5\" points=\"{:.1f},{:.1f} "
                     "{:.1f},{:.1f} {:.1f},{:.1f}\"/>\n", x.at(slope_start_x), y.at(slope_start_y),
                     x.at(roof.ridge_point), y.at(roof.peak_flops_per_s), x.at(x_end), y.at(roof.peak_flops_per_s));
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#d62728\">compute roof {}</text>\n",
                     x.at(roof.ridge_point) + 6, y.at(roof.peak_flops_per_s) - 6,
                     roof.roofs.empty() ? std::string("compute roof") : xml_escape(roof.roofs.front().name),
                     si(roof.peak_flops_per_s, "FLOP/s"));
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#d62728\" text-anchor=\"end\">HBM {}</text>\n",
                     x.at(roof.ridge_point / 10) - 4, y.at(roof.peak_flops_per_s / 10) - 8, si(roof.hbm_bytes_per_s, "B/s"));
  svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#d62728\"/>\n", x.at(roof.ridge_point),
                     y.at(roof.peak_flops_per_s));
  svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#d62728\" "
                     "stroke-dasharray=\"4 3\"/>\n", x.at(roof.ridge_point), y.at(roof.peak_flops_per_s), y.from);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#d62728\">ridge {:.0f} FLOP/B</text>\n",
                     x.at(roof.ridge_point) + 4, y.from - 8, roof.ridge_point);

  // The lower roofs some op sits under (f32 Vector or Scalar work cannot reach the Tensor engine's
  // peak), dashed from where the bandwidth slope meets them, named at the right end.
  for (const Roof& lower : roof.roofs) {
    if (lower.flops_per_s >= roof.peak_flops_per_s) continue;
    const bool used = std::any_of(roof.ops.begin(), roof.ops.end(), [&](const RooflinePoint& p) { return p.roof == lower.name; });
    if (!used) continue;
    const double meets = lower.flops_per_s / roof.hbm_bytes_per_s;
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#7f7f7f\" stroke-width=\"1.5\" "
                       "stroke-dasharray=\"6 3\"/>\n", x.at(meets), y.at(lower.flops_per_s), x.at(x_end), y.at(lower.flops_per_s));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#7f7f7f\" text-anchor=\"end\">{} {}</text>\n", x.at(x_end) - 4,
                       y.at(lower.flops_per_s) - 4, xml_escape(lower.name), si(lower.flops_per_s, "FLOP/s"));
  }

  // One circle per op, area proportional to its share of the time; the legend names them.
  double legend_y = kTop + 10;
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">Ops (circle area = device time)</text>\n",
                     kWidth - kRight + 15, legend_y);
  for (size_t i = 0; i < roof.ops.size(); ++i) {
    const RooflinePoint& p = roof.ops[i];
    const char* color = kPalette[i % std::size(kPalette)];
    const double share = total_time > 0 ? p.time_ns / total_time : 0;
    const double radius = std::max(kMinRadius, kMaxRadius * std::sqrt(share));
    const double px = x.at(p.intensity > 0 ? p.intensity : std::pow(10.0, x.low_decade));
    const double py = y.at(p.achieved_flops_per_s > 0 ? p.achieved_flops_per_s : std::pow(10.0, y.low_decade));
    svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\" fill-opacity=\"0.6\" "
                       "stroke=\"{}\"><title>{}: {:.3g} FLOP/B, {}, {} under the {} roof, {:.0f}% of attainable</title></circle>\n",
                       px, py, radius, color, color, xml_escape(p.name), p.intensity,
                       si(p.achieved_flops_per_s, "FLOP/s"), bound_name(p.bound), xml_escape(p.roof), 100 * p.efficiency);
    legend_y += 20;
    svg += fmt::format("<circle cx=\"{}\" cy=\"{:.1f}\" r=\"6\" fill=\"{}\" fill-opacity=\"0.6\" stroke=\"{}\"/>\n",
                       kWidth - kRight + 22, legend_y - 4, color, color);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{} ({}, {:.0f}%)</text>\n", kWidth - kRight + 34, legend_y,
                       xml_escape(p.name), p.bound == Bound::memory ? "memory" : "compute", 100 * share);
  }
  svg += "</svg>\n";
  return svg;
}

void roofline_svg_save(const Roofline& roof, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  SIGHTLINE_CHECK(out.good(), "cannot write roofline chart '{}': {}; check the directory", path, std::strerror(errno));
  out << roofline_svg(roof);
  SIGHTLINE_CHECK(out.good(), "writing roofline chart '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace sightline::analysis
