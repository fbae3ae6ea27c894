// The pieces `moet report`'s pages are made of (metrics/report.cpp: one run, report_compare.cpp:
// several): HTML escaping and numbers, the page's head and style sheet, line charts as inline
// SVG (legend, round ticks, vertical markers) and the expert-load colours. Nothing is fetched
// and nothing runs: the pages are HTML, CSS and SVG only.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moet::report_page {

std::string escape(const std::string& s);
// snprintf of one number: num("%.2f", x)
std::string num(const char* f, double v);
// A JSON number field as a double (NaN when absent, null or not a number).
double field(const nlohmann::json& r, const char* key);
// A table row <tr><th>k</th><td>v</td></tr>, both escaped.
std::string row(const std::string& k, const std::string& v);
// "<!DOCTYPE html>..." up to and including the page's <h1>: the style sheet inline.
std::string page_head(const std::string& title);

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> xy;
  bool dots = false;    // points (sparse series such as held-out loss) rather than a line
  bool joined = false;  // with dots: also a thin line through them
  std::string dash;     // SVG stroke-dasharray of the line ("" solid)
};

// A vertical line across the plot at x (a run's data changed there), labelled at its top.
struct Marker {
  double x = 0;
  std::string label, color;
};

// A line chart as inline SVG; "" when no series has a point. The legend names every series with
// a point (wrapping onto more rows when long); percent: y ticks as percentages.
std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::vector<Series>& series, bool percent = false,
                       const std::vector<Marker>& markers = {});

// One series of (x key, y key) over the records that have both (y times scale).
Series series(const std::vector<nlohmann::json>& records, const char* x_key, const char* y_key,
              const std::string& name, const std::string& color, double scale = 1);

// White at the mean load (ratio 1), dark red at the largest ratio `top`, blue towards no tokens.
std::string heat_color(double ratio, double top);

}  // namespace moet::report_page
