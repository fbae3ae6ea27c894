#include "metrics/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "metrics/report.h"

namespace moet::report_page {

using json = nlohmann::json;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string num(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double field(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : std::nan("");
}

std::string row(const std::string& k, const std::string& v) {
  return "<tr><th>" + escape(k) + "</th><td>" + escape(v) + "</td></tr>";
}

std::string page_head(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<link rel=\"icon\" href=\"data:,\"><title>" +
         escape(title) +
         "</title><style>"
         "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
         "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
         ".charts{display:flex;flex-wrap:wrap;gap:12px}"
         ".chart{background:#fafafa;border:1px solid #ddd}"
         ".title{font-size:13px;font-weight:bold;fill:#222}"
         ".frame{fill:#fff;stroke:#999}.grid{stroke:#eee}"
         ".ytick{font-size:10px;text-anchor:end;fill:#555}"
         ".xtick{font-size:10px;text-anchor:middle;fill:#555}"
         ".xlabel{font-size:11px;text-anchor:middle;fill:#333}"
         ".xlabel-left{font-size:11px;fill:#333}.legend{font-size:11px;fill:#333}"
         ".marker{font-size:10px;fill:#333}"
         "table{border-collapse:collapse}th,td{text-align:left;padding:2px 10px;"
         "border-bottom:1px solid #eee;font-size:13px}"
         "td.num{text-align:right}"
         ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;"
         "vertical-align:middle}"
         "pre{background:#f4f4f4;padding:8px;font-size:12px;white-space:pre-wrap}"
         ".none{color:#777}"
         "</style></head><body>\n<h1>" +
         escape(title) + "</h1>\n";
}

namespace {

const int kW = 520, kH = 260, kLeft = 64, kRight = 12, kTop = 44, kBottom = 40, kLegendRow = 14;

}  // namespace

std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::vector<Series>& series, bool percent,
                       const std::vector<Marker>& markers) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (auto [x, y] : s.xy)
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(x0 <= x1)) return "";
  for (const Marker& m : markers) x0 = std::min(x0, m.x), x1 = std::max(x1, m.x);
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= std::max(1e-12, std::fabs(y0) * 0.05), y1 += std::max(1e-12, y1 * 0.05);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  // The legend: one row under the title, more when the names do not fit
  struct Item {
    const Series* s;
    double x;
    int row;
  };
  std::vector<Item> legend;
  double legend_x = kLeft;
  int rows = 1;
  for (const Series& s : series) {
    if (s.xy.empty()) continue;
    const double w = 6.5 * double(s.name.size()) + 26;
    if (legend_x > kLeft && legend_x + w > kW - kRight) legend_x = kLeft, ++rows;
    legend.push_back({&s, legend_x, rows - 1});
    legend_x += w;
  }
  const int top = kTop + kLegendRow * (rows - 1), height = kH + kLegendRow * (rows - 1);
  const double pw = kW - kLeft - kRight, ph = height - top - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + (1 - (y - y0) / (y1 - y0)) * ph; };
  std::string svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(kW) + "\" height=\"" + std::to_string(height) + "\">";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"18\" class=\"title\">" + escape(title) +
         "</text>";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(top) + "\" width=\"" +
         num("%.0f", pw) + "\" height=\"" + num("%.0f", ph) + "\" class=\"frame\"/>";
  const double scale = percent ? 100 : 1;  // ticks at round percentages
  const AxisTicks yt = axis_ticks(y0 * scale, y1 * scale), xt = axis_ticks(x0, x1);
  for (double t : yt.values) {
    const double y = t / scale;
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" x2=\"" + num("%.1f", kLeft + pw) +
           "\" y1=\"" + num("%.1f", py(y)) + "\" y2=\"" + num("%.1f", py(y)) +
           "\" class=\"grid\"/>";
    svg += "<text x=\"" + std::to_string(kLeft - 4) + "\" y=\"" + num("%.1f", py(y) + 4) +
           "\" class=\"ytick\">" + tick_label(t, yt.step) + (percent ? "%" : "") + "</text>";
  }
  for (double x : xt.values)
    svg += "<text x=\"" + num("%.1f", px(x)) + "\" y=\"" + std::to_string(height - kBottom + 14) +
           "\" class=\"xtick\">" + tick_label(x, xt.step) + "</text>";
  svg += "<text x=\"" + num("%.0f", kLeft + pw / 2) + "\" y=\"" + std::to_string(height - 6) +
         "\" class=\"xlabel\">" + escape(x_label) + "</text>";
  for (size_t i = 0; i < markers.size(); ++i) {
    const Marker& m = markers[i];
    const std::string color = m.color.empty() ? "#555" : m.color;
    svg += "<line class=\"marker-line\" x1=\"" + num("%.1f", px(m.x)) + "\" x2=\"" +
           num("%.1f", px(m.x)) + "\" y1=\"" + std::to_string(top) + "\" y2=\"" +
           num("%.1f", top + ph) + "\" stroke=\"" + color +
           "\" stroke-width=\"1\" stroke-dasharray=\"4,3\"/>";
    // labels stacked down the plot when several markers share it
    svg += "<text x=\"" + num("%.1f", px(m.x) + 3) + "\" y=\"" +
           std::to_string(top + 11 + 11 * int(i % 4)) + "\" class=\"marker\">" + escape(m.label) +
           "</text>";
  }
  for (const Item& it : legend) {
    const Series& s = *it.s;
    if (!s.dots || s.joined) {
      svg += "<polyline fill=\"none\" stroke-width=\"" + std::string(s.dots ? "1" : "1.5") +
             "\" stroke=\"" + s.color + "\"" +
             (s.dash.empty() ? "" : " stroke-dasharray=\"" + s.dash + "\"") + " points=\"";
      for (auto [x, y] : s.xy) svg += num("%.1f", px(x)) + "," + num("%.1f", py(y)) + " ";
      svg += "\"/>";
    }
    if (s.dots)
      for (auto [x, y] : s.xy)
        svg += "<circle cx=\"" + num("%.1f", px(x)) + "\" cy=\"" + num("%.1f", py(y)) +
               "\" r=\"3\" fill=\"" + s.color + "\"/>";
    const int ly = 26 + kLegendRow * it.row;
    svg += "<rect x=\"" + num("%.0f", it.x) + "\" y=\"" + std::to_string(ly) +
           "\" width=\"10\" height=\"10\" fill=\"" + s.color + "\"/><text x=\"" +
           num("%.0f", it.x + 13) + "\" y=\"" + std::to_string(ly + 9) + "\" class=\"legend\">" +
           escape(s.name) + "</text>";
  }
  return svg + "</svg>";
}

Series series(const std::vector<json>& records, const char* x_key, const char* y_key,
              const std::string& name, const std::string& color, double scale) {
  Series s;
  s.name = name;
  s.color = color;
  for (const json& r : records) {
    const double x = field(r, x_key), y = field(r, y_key);
    if (std::isfinite(x) && std::isfinite(y)) s.xy.emplace_back(x, y * scale);
  }
  return s;
}

std::string heat_color(double ratio, double top) {
  // over-loaded: 0..1 from the mean to the largest ratio; under-loaded: -1 (no tokens)..0
  const double t = ratio >= 1 ? (top > 1 ? std::min(1.0, (ratio - 1) / (top - 1)) : 0.0)
                              : std::max(-1.0, ratio - 1);
  int r = 255, g = 255, b = 255;
  if (t >= 0)
    g = b = int(std::lround(255 * (1 - t))), r = int(std::lround(255 - 80 * t));
  else
    r = g = int(std::lround(255 * (1 + t))), b = 255;  // under-loaded: blue
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

}  // namespace moet::report_page
