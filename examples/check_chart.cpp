// Checks a metrics chart (support/metrics.hpp's SVG) as a reader would see it:
//  - each panel's value axis has round ticks: evenly spaced by 1, 2 or 5 times
//    a power of ten, each a multiple of that step;
//  - an accuracy panel's ticks lie within [0, 1];
//  - no text (legend, labels) is drawn inside a panel's frame, over the data;
//  - every data point lies inside its panel.
// Usage: check_chart FILE.svg; prints what is wrong and exits 1, else exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Frame {
  double x, y, w, h;
  std::string title;
  std::vector<double> ticks;
  bool contains(double px, double py) const { return px > x && px < x + w && py > y && py < y + h; }
};

struct Text {
  double x, y;
  bool end_anchored;
  std::string content;
};

double attribute(const std::string& element, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(element, m, std::regex("\\b" + name + "=\"([-0-9.e]+)\""))) return NAN;
  return std::stod(m[1].str());
}

bool is_number(const std::string& s, double& value) {
  char* end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: check_chart FILE.svg\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "check_chart: cannot read '%s'\n", argv[1]);
    return 2;
  }
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::vector<Frame> frames;
  const std::regex rect("<rect [^>]*fill=\"none\"[^>]*>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator(); ++it) {
    const std::string e = it->str();
    frames.push_back({attribute(e, "x"), attribute(e, "y"), attribute(e, "width"), attribute(e, "height"), {}, {}});
  }
  std::vector<Text> texts;
  const std::regex text("<text ([^>]*)>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator(); ++it) {
    const std::string attrs = (*it)[1].str();
    texts.push_back({attribute(attrs, "x"), attribute(attrs, "y"), attrs.find("text-anchor=\"end\"") != std::string::npos,
                     (*it)[2].str()});
  }
  std::vector<std::pair<double, double>> points;
  const std::regex circle("<circle [^>]*>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator(); ++it)
    points.emplace_back(attribute(it->str(), "cx"), attribute(it->str(), "cy"));

  std::vector<std::string> problems;
  if (frames.empty()) problems.push_back("no panel (a <rect fill=\"none\">) found");
  for (auto& t : texts) {
    double value = 0;
    for (auto& f : frames) {
      // A panel's title is the text just above its frame; its ticks are the
      // right-aligned numbers just left of it.
      if (t.x > f.x && t.x < f.x + f.w && t.y < f.y && t.y > f.y - 20) f.title = t.content;
      if (t.end_anchored && is_number(t.content, value) && t.x < f.x && t.x > f.x - 40 && t.y >= f.y - 1 &&
          t.y <= f.y + f.h + 10)
        f.ticks.push_back(value);
      if (f.contains(t.x, t.y))
        problems.push_back("text '" + t.content + "' is drawn inside the panel '" + f.title + "', over the data");
    }
  }
  for (auto& f : frames) {
    std::sort(f.ticks.begin(), f.ticks.end());
    if (f.ticks.size() < 2) {
      problems.push_back("panel '" + f.title + "' has fewer than two value ticks");
      continue;
    }
    const double step = f.ticks[1] - f.ticks[0];
    const double magnitude = std::pow(10.0, std::floor(std::log10(step)));
    const double mantissa = step / magnitude;
    const bool round_step = std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                            std::abs(mantissa - 5) < 1e-6 || std::abs(mantissa - 10) < 1e-6;
    std::ostringstream list;
    for (double v : f.ticks) list << v << ' ';
    if (!round_step) problems.push_back("panel '" + f.title + "': tick step " + std::to_string(step) +
                                        " is not 1, 2 or 5 times a power of ten (ticks " + list.str() + ")");
    for (std::size_t i = 0; i < f.ticks.size(); ++i) {
      const double k = f.ticks[i] / step;
      if (std::abs(f.ticks[i] - (f.ticks[0] + step * double(i))) > step * 1e-3 || std::abs(k - std::round(k)) > 1e-3) {
        problems.push_back("panel '" + f.title + "': ticks not evenly spaced multiples of the step (" + list.str() + ")");
        break;
      }
    }
    if (f.title.find("accuracy") != std::string::npos && (f.ticks.front() < 0 || f.ticks.back() > 1))
      problems.push_back("panel '" + f.title + "': accuracy ticks outside [0, 1] (" + list.str() + ")");
  }
  for (auto& [x, y] : points) {
    bool inside = false;
    for (auto& f : frames) inside = inside || (x >= f.x && x <= f.x + f.w && y >= f.y && y <= f.y + f.h);
    if (!inside) problems.push_back("a data point at (" + std::to_string(x) + ", " + std::to_string(y) + ") is outside every panel");
  }
  for (auto& p : problems) std::fprintf(stderr, "check_chart: %s: %s\n", argv[1], p.c_str());
  if (problems.empty()) std::printf("check_chart: %s: %zu panels, round ticks, no text over the data\n", argv[1], frames.size());
  return problems.empty() ? 0 : 1;
}
