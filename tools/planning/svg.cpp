// The tiny SVG writer: primitives on a canvas, and the line, bar and heatmap charts the tools
// draw. Coordinates are user units; text uses a sans-serif stack readable at 100%.
#include "tools/planning/svg.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "runtime/io/atomic_file.h"
#include "runtime/core/check.h"

namespace remat {

std::string svg_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

const char* svg_color(int index) {
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                        "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                        "#bcbd22", "#17becf"};
  const int n = static_cast<int>(sizeof kColors / sizeof kColors[0]);
  return kColors[((index % n) + n) % n];
}

std::vector<double> svg_nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::pair<std::string, double> svg_byte_unit(double max_bytes) {
  if (max_bytes >= 1e9) return {"GB", 1e9};
  if (max_bytes >= 1e6) return {"MB", 1e6};
  if (max_bytes >= 1e3) return {"KB", 1e3};
  return {"B", 1};
}

double svg_text_width(const std::string& s, double size) {
  size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;  // UTF-8 code points
  return 0.6 * size * static_cast<double>(chars);
}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

// Tick labels: as few decimals as the tick step needs (0.25 -> 2, 5 -> 0).
std::string tick_label(double v, double step) {
  char buf[32];
  if (std::fabs(v) >= 1e7 || (v != 0 && std::fabs(v) < 1e-4)) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
  }
  int decimals = 0;
  double scaled = step;
  while (decimals < 6 && std::fabs(scaled - std::round(scaled)) > 1e-6 * std::max(1.0, scaled))
    scaled *= 10, ++decimals;
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// An axis-aligned box in canvas units.
struct Box {
  double x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// Whether the segment (ax, ay)-(bx, by) passes through the box (Liang-Barsky clipping).
bool segment_hits(const Box& b, double ax, double ay, double bx, double by) {
  double t0 = 0, t1 = 1;
  const double dx = bx - ax, dy = by - ay;
  auto clip = [&](double p, double q) {  // p * t <= q
    if (p == 0) return q >= 0;
    const double t = q / p;
    if (p < 0) t0 = std::max(t0, t);
    else t1 = std::min(t1, t);
    return t0 <= t1;
  };
  return clip(-dx, ax - b.x0) && clip(dx, b.x1 - ax) && clip(-dy, ay - b.y0) && clip(dy, b.y1 - ay);
}

// The box a 12-unit label takes with its baseline at y, anchored at x.
Box label_box(double x, double y, const std::string& s, const std::string& anchor) {
  const double w = svg_text_width(s, 12);
  const double x0 = anchor == "end" ? x - w : anchor == "middle" ? x - w / 2 : x;
  return {x0, y - 12 * 0.8, x0 + w, y + 12 * 0.25};
}

}  // namespace

SvgCanvas::SvgCanvas(double width, double height, const std::string& title)
    : width_(width), height_(height), title_(title) {}

void SvgCanvas::line(double x1, double y1, double x2, double y2, const std::string& color,
                     double width, bool dashed) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
           num(y2) + "\" stroke=\"" + svg_escape(color) + "\" stroke-width=\"" + num(width) +
           "\"" + (dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
}

void SvgCanvas::rect(double x, double y, double w, double h, const std::string& fill,
                     const std::string& stroke) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
           "\" height=\"" + num(h) + "\" fill=\"" + svg_escape(fill) + "\" stroke=\"" +
           svg_escape(stroke) + "\"/>\n";
}

void SvgCanvas::circle(double x, double y, double r, const std::string& fill) {
  body_ += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"" +
           svg_escape(fill) + "\"/>\n";
}

void SvgCanvas::polyline(const std::vector<std::pair<double, double>>& points,
                         const std::string& color, double width, int dash) {
  if (points.empty()) return;
  static const char* const kDash[] = {"8,4", "2,3", "10,3,2,3", "4,4", "12,4,2,4,2,4"};
  std::string pts;
  for (const auto& p : points) pts += (pts.empty() ? "" : " ") + num(p.first) + "," + num(p.second);
  body_ += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + svg_escape(color) +
           "\" stroke-width=\"" + num(width) + "\" stroke-linejoin=\"round\"";
  if (dash > 0) body_ += std::string(" stroke-dasharray=\"") + kDash[(dash - 1) % 5] + "\"";
  body_ += "/>\n";
}

void SvgCanvas::text(double x, double y, const std::string& s, double size,
                     const std::string& anchor, const std::string& color, double rotate,
                     bool bold) {
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) +
           "\" text-anchor=\"" + svg_escape(anchor) + "\" fill=\"" + svg_escape(color) + "\"";
  if (bold) body_ += " font-weight=\"bold\"";
  if (rotate != 0)
    body_ += " transform=\"rotate(" + num(rotate) + " " + num(x) + " " + num(y) + ")\"";
  body_ += ">" + svg_escape(s) + "</text>\n";
}

std::string SvgCanvas::str() const {
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width_) << "\" height=\""
     << num(height_) << "\" viewBox=\"0 0 " << num(width_) << " " << num(height_)
     << "\" font-family=\"Helvetica, Arial, sans-serif\">\n"
     << "<title>" << svg_escape(title_) << "</title>\n"
     << "<rect x=\"0\" y=\"0\" width=\"" << num(width_) << "\" height=\"" << num(height_)
     << "\" fill=\"#ffffff\"/>\n"
     << body_ << "</svg>\n";
  return os.str();
}

void svg_save(const std::string& svg, const std::string& path) { write_file_atomic(path, svg); }

void svg_make_dir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) REMAT_USER_ERROR(dir << ": exists and is not a directory");
    return;
  }
  if (mkdir(dir.c_str(), 0755) != 0) REMAT_USER_ERROR(dir << ": cannot create directory");
}

std::string svg_line_chart(const SvgLineChart& c, double width, double height) {
  SvgCanvas cv(width, height, c.title);
  const double left = 80, right = 200, top = 50, bottom = 60;
  const double pw = width - left - right, ph = height - top - bottom;
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
    }
  for (const auto& h : c.hlines) ylo = std::min(ylo, h.y), yhi = std::max(yhi, h.y);
  if (c.x_min < c.x_max) xlo = std::min(xlo, c.x_min), xhi = std::max(xhi, c.x_max);
  if (!std::isfinite(xlo)) xlo = 0, xhi = 1;
  if (!std::isfinite(ylo)) ylo = 0, yhi = 1;
  // A broken axis starts below the data, with room under the lowest line for a label.
  const bool broken = c.y_from_zero && c.y_break && ylo > 0 && yhi - ylo < yhi / 3;
  if (c.y_from_zero && !broken) ylo = std::min(ylo, 0.0);
  if (xhi <= xlo) xhi = xlo + 1;
  if (yhi <= ylo) yhi = ylo + 1;
  // Dots at the ends stay inside the plot; a zero-based axis keeps its origin.
  const double xpad = (xhi - xlo) * 0.03;
  if (xlo != 0) xlo -= xpad;
  xhi += xpad;
  const double ypad = (yhi - ylo) * (broken ? 0.08 : 0.05);
  yhi += ypad;
  if (!c.y_from_zero || broken || ylo < 0) ylo -= ypad;
  const std::vector<double> xt = svg_nice_ticks(xlo, xhi), yt = svg_nice_ticks(ylo, yhi);
  auto sx = [&](double x) { return left + (x - xlo) / (xhi - xlo) * pw; };
  auto sy = [&](double y) { return top + ph - (y - ylo) / (yhi - ylo) * ph; };

  cv.text(width / 2, 28, c.title, 17, "middle", "#222", 0, true);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : xt) {
    if (t < xlo - 1e-12 || t > xhi + 1e-12) continue;
    cv.line(sx(t), top, sx(t), top + ph, "#e6e6e6");
    cv.text(sx(t), top + ph + 18, tick_label(t, xstep), 12, "middle");
  }
  for (double t : yt) {
    if (t < ylo - 1e-12 || t > yhi + 1e-12) continue;
    cv.line(left, sy(t), left + pw, sy(t), "#e6e6e6");
    bool crowded = false;  // an hline's own axis tick is there
    for (const auto& h : c.hlines) crowded |= !h.axis_label.empty() && std::fabs(sy(t) - sy(h.y)) < 14;
    if (!crowded) cv.text(left - 8, sy(t) + 4, tick_label(t, ystep), 12, "end");
  }
  cv.line(left, top + ph, left + pw, top + ph, "#444", 1.2);
  cv.line(left, top, left, top + ph, "#444", 1.2);
  if (broken) {  // the axis does not reach zero: a gap with two slanted strokes
    const double by = top + ph - 10;
    cv.rect(left - 6, by - 3, 12, 6, "#ffffff");
    cv.line(left - 6, by + 1, left + 6, by - 5, "#444", 1.2);
    cv.line(left - 6, by + 5, left + 6, by - 1, "#444", 1.2);
  }
  cv.text(left + pw / 2, height - 16, c.x_label, 14, "middle");
  cv.text(22, top + ph / 2, c.y_label, 14, "middle", "#222", -90);

  std::vector<std::vector<std::pair<double, double>>> curves;  // the series in canvas units
  for (const SvgSeries& s : c.series) {
    curves.emplace_back();
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (s.step && i > 0) curves.back().emplace_back(sx(s.x[i]), sy(s.y[i - 1]));
      curves.back().emplace_back(sx(s.x[i]), sy(s.y[i]));
    }
  }
  // Each line's label goes to the first of six places (above, then below the line; at the right
  // end, the left end, the middle) where it crosses no other line, no curve, no label placed
  // before it and stays inside the plot; where every place crosses something, to the one that
  // crosses least.
  std::vector<Box> placed;
  for (size_t k = 0; k < c.hlines.size(); ++k) {
    const SvgHLine& h = c.hlines[k];
    cv.line(left, sy(h.y), left + pw, sy(h.y), h.color, 1.5, true);
    if (!h.axis_label.empty()) {
      cv.line(left - 5, sy(h.y), left, sy(h.y), h.color, 1.5);
      cv.text(left - 8, sy(h.y) + 4, h.axis_label, 12, "end", h.color, 0, true);
    }
    auto crossings = [&](const Box& b) {
      int n = 0;
      if (b.x0 < left || b.x1 > left + pw || b.y0 < top || b.y1 > top + ph) ++n;
      for (size_t o = 0; o < c.hlines.size(); ++o)
        n += o != k && segment_hits(b, left, sy(c.hlines[o].y), left + pw, sy(c.hlines[o].y));
      for (const Box& p : placed) n += b.overlaps(p);
      for (const auto& pts : curves)
        for (size_t i = 1; i < pts.size(); ++i)
          n += segment_hits(b, pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second);
      return n;
    };
    struct Place { double x; const char* anchor; };
    const Place places[] = {{left + pw - 6, "end"}, {left + 6, "start"}, {left + pw / 2, "middle"}};
    Box best{};
    double best_x = 0, best_y = 0;
    const char* best_anchor = "end";
    int best_n = std::numeric_limits<int>::max();
    for (const Place& pl : places)
      for (double y : {sy(h.y) - 5, sy(h.y) + 15}) {
        const Box b = label_box(pl.x, y, h.label, pl.anchor);
        const int n = crossings(b);
        if (n < best_n) best_n = n, best = b, best_x = pl.x, best_y = y, best_anchor = pl.anchor;
      }
    placed.push_back(best);
    cv.text(best_x, best_y, h.label, 12, best_anchor, h.color);
  }
  double ly = top + 10;
  for (size_t k = 0; k < c.series.size(); ++k) {
    const SvgSeries& s = c.series[k];
    const std::string color = svg_color(static_cast<int>(k));
    cv.polyline(curves[k], color, s.markers ? 2 : 1.5, s.dash);
    // Earlier series get bigger markers, and every other one is a square, so coinciding points
    // stay visible as rings and shapes.
    const double n = static_cast<double>(c.series.size());
    const double radius = 2.5 + 3.0 * (n - 1 - static_cast<double>(k)) / std::max(1.0, n - 1);
    auto marker = [&](double x, double y) {
      if (k % 2 == 0) cv.circle(x, y, radius, color);
      else cv.rect(x - radius, y - radius, 2 * radius, 2 * radius, "none", color);
    };
    if (s.markers)
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) marker(sx(s.x[i]), sy(s.y[i]));
    // Legend entry in the right margin.
    const double lx = left + pw + 20;
    cv.polyline({{lx, ly + 10}, {lx + 22, ly + 10}}, color, 3, s.dash);
    if (s.markers) marker(lx + 11, ly + 10);
    cv.text(lx + 28, ly + 14, s.x.empty() ? s.name + " (no points)" : s.name, 12);
    ly += 20;
  }
  return cv.str();
}

std::string svg_bar_chart(const SvgBarChart& c, double width, double height) {
  SvgCanvas cv(width, height, c.title);
  const double left = 80, right = 30, top = 50, bottom = 120;
  const double pw = width - left - right, ph = height - top - bottom;
  double yhi = 0;
  for (double v : c.values) yhi = std::max(yhi, v);
  if (yhi <= 0) yhi = 1;
  yhi *= 1.12;
  const std::vector<double> yt = svg_nice_ticks(0, yhi);
  auto sy = [&](double y) { return top + ph - y / yhi * ph; };
  cv.text(width / 2, 28, c.title, 17, "middle", "#222", 0, true);
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : yt) {
    if (t > yhi) continue;
    cv.line(left, sy(t), left + pw, sy(t), "#e6e6e6");
    cv.text(left - 8, sy(t) + 4, tick_label(t, ystep), 12, "end");
  }
  const size_t n = c.values.size();
  const double slot = n ? pw / static_cast<double>(n) : pw, bw = slot * 0.65;
  for (size_t i = 0; i < n; ++i) {
    const double x = left + slot * static_cast<double>(i) + (slot - bw) / 2;
    const double v = std::max(0.0, c.values[i]);
    cv.rect(x, sy(v), bw, top + ph - sy(v), svg_color(static_cast<int>(i)));
    const std::string note = i < c.notes.size() && !c.notes[i].empty() ? c.notes[i] : num(v);
    cv.text(x + bw / 2, sy(v) - 6, note, 12, "middle");
    if (i < c.labels.size())
      cv.text(x + bw / 2, top + ph + 14, c.labels[i], 12, "end", "#222", -35);
  }
  cv.line(left, top + ph, left + pw, top + ph, "#444", 1.2);
  cv.line(left, top, left, top + ph, "#444", 1.2);
  cv.text(22, top + ph / 2, c.y_label, 14, "middle", "#222", -90);
  return cv.str();
}

std::string svg_heatmaps(const std::string& title, const std::vector<SvgHeatmap>& maps,
                         const std::vector<SvgCategory>& categories) {
  int max_rows = 1, max_cols = 1;
  for (const auto& m : maps) max_rows = std::max(max_rows, m.rows), max_cols = std::max(max_cols, m.cols);
  // Cells shrink for big graphs so each map stays about 560 units wide, but not below 2 units:
  // past 280 nodes the figure grows, and a single recomputed cell stays visible.
  const double cell = std::max(2.0, std::min(14.0, 560.0 / std::max(max_rows, max_cols)));
  const double mw = cell * max_cols, mh = cell * max_rows;
  const double left = 90, gap = 90, top = 80, bottom = 150;
  const double width = left + static_cast<double>(maps.size()) * (mw + gap) + 170;
  const double height = std::max(top + mh + bottom, 260.0);
  SvgCanvas cv(width, height, title);
  cv.text(width / 2, 28, title, 17, "middle", "#222", 0, true);
  for (size_t k = 0; k < maps.size(); ++k) {
    const SvgHeatmap& m = maps[k];
    REMAT_CHECK(m.cells.size() == static_cast<size_t>(m.rows) * m.cols, "heatmap cell count");
    const double x0 = left + static_cast<double>(k) * (mw + gap);
    cv.text(x0 + cell * m.cols / 2, top - 22, m.title, 15, "middle", "#222", 0, true);
    cv.rect(x0, top, cell * m.cols, cell * m.rows, "#ffffff", "#999");
    // Horizontal runs of one category become one rectangle (far fewer elements).
    for (int r = 0; r < m.rows; ++r) {
      int c = 0;
      while (c < m.cols) {
        const int v = m.cells[static_cast<size_t>(r) * m.cols + c];
        int e = c + 1;
        while (e < m.cols && m.cells[static_cast<size_t>(r) * m.cols + e] == v) ++e;
        if (v >= 1 && v <= static_cast<int>(categories.size()))
          cv.rect(x0 + cell * c, top + cell * r, cell * (e - c), cell,
                  categories[static_cast<size_t>(v - 1)].color);
        c = e;
      }
    }
    for (const auto& t : m.col_ticks) {  // node names under the map, rotated
      const double x = x0 + cell * (t.first + 0.5);
      // Long names keep their end (".grad_input"), which tells nodes apart, within the margin.
      const std::string name =
          t.second.size() > 18 ? "\u2026" + t.second.substr(t.second.size() - 17) : t.second;
      cv.line(x, top + cell * m.rows, x, top + cell * m.rows + 4, "#444");
      cv.text(x + 3, top + cell * m.rows + 8, name, 10, "end", "#444", -60);
    }
    for (const auto& t : m.row_ticks) {
      const double y = top + cell * (t.first + 0.5);
      cv.line(x0 - 4, y, x0, y, "#444");
      cv.text(x0 - 6, y + 3, t.second, 10, "end", "#444");
    }
    if (m.col_mark >= 0)
      cv.line(x0 + cell * m.col_mark, top - 6, x0 + cell * m.col_mark, top + cell * m.rows, "#d62728",
              1.2, true);
    if (m.row_mark >= 0)
      cv.line(x0 - 2, top + cell * m.row_mark, x0 + cell * m.cols, top + cell * m.row_mark,
              "#d62728", 1.2, true);
    if (m.col_mark >= 0 && !m.mark_label.empty())
      cv.text(x0 + cell * m.col_mark, top - 8, m.mark_label, 11, "middle", "#d62728");
    cv.text(x0 + cell * m.cols / 2, top + cell * m.rows + 140, m.col_label, 13, "middle");
    cv.text(x0 - 60, top + cell * m.rows / 2, m.row_label, 13, "middle", "#222", -90);
  }
  const double lx = left + static_cast<double>(maps.size()) * (mw + gap);
  for (size_t i = 0; i < categories.size(); ++i) {
    const double y = top + 24 * static_cast<double>(i);
    cv.rect(lx, y, 14, 14, categories[i].color, "#666");
    cv.text(lx + 22, y + 12, categories[i].name, 12);
  }
  return cv.str();
}

}  // namespace remat
