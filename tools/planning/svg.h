// A tiny SVG writer for the tools' figures: a canvas of primitives (lines, rectangles, text,
// polylines), and three charts on it: a line chart (axes, ticks, legend, horizontal reference
// lines), a bar chart, and heatmap grids of categorical cells (schedule matrices).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace remat {

// Escapes &, <, >, " and ' for text and attribute values.
std::string svg_escape(const std::string& text);

// A fixed palette of distinguishable colours ("#1f77b4", ...), cycling.
const char* svg_color(int index);

// "Nice" tick positions (1, 2, 5 x 10^k steps) covering [lo, hi], about `target` of them.
std::vector<double> svg_nice_ticks(double lo, double hi, int target = 6);

// Picks a byte unit for values up to `max_bytes`: {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3} or
// {"B", 1}. Axes divide byte values by the scale.
std::pair<std::string, double> svg_byte_unit(double max_bytes);

// The width a text line of `size` units takes, estimated from its characters (0.6 em each:
// wider than Helvetica's average, so estimated boxes contain the drawn text).
double svg_text_width(const std::string& s, double size);

// The SVG primitives, in user units (= pixels at 100%). str() is a complete document with a
// viewBox, a <title> and a white background.
class SvgCanvas {
 public:
  SvgCanvas(double width, double height, const std::string& title);

  void line(double x1, double y1, double x2, double y2, const std::string& color,
            double width = 1, bool dashed = false);
  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& stroke = "none");
  void circle(double x, double y, double r, const std::string& fill);
  // dash: 0 solid, k >= 1 one of a few distinct dash patterns.
  void polyline(const std::vector<std::pair<double, double>>& points, const std::string& color,
                double width = 2, int dash = 0);
  // anchor: "start", "middle" or "end"; rotate in degrees about (x, y).
  void text(double x, double y, const std::string& s, double size = 13,
            const std::string& anchor = "start", const std::string& color = "#222",
            double rotate = 0, bool bold = false);

  double width() const { return width_; }
  double height() const { return height_; }
  std::string str() const;

 private:
  double width_, height_;
  std::string title_;
  std::string body_;
};

// Writes `svg` to `path`; UserError naming the path if it cannot be written.
void svg_save(const std::string& svg, const std::string& path);

// Creates the output folder `dir` (one level) unless it exists; UserError if it cannot.
void svg_make_dir(const std::string& dir);

struct SvgSeries {
  std::string name;
  std::vector<double> x, y;  // same length; drawn in order
  bool markers = true;       // a marker at each point (shape by series: circle, square, ...)
  bool step = false;         // hold each y until the next x (a staircase)
  int dash = 0;              // 0 solid, k >= 1 a dash pattern (overlapping series stay visible)
};

struct SvgHLine {
  double y = 0;
  std::string label;             // above or below the line, at its right end, left end or
                                 // middle: the first place where it crosses no other line, no
                                 // curve and no label (see svg_line_chart)
  std::string color = "#d62728";
  std::string axis_label;        // non-empty: also a tick on the y axis with this text
};

struct SvgLineChart {
  std::string title, x_label, y_label;
  std::vector<SvgSeries> series;  // colours from svg_color(index)
  std::vector<SvgHLine> hlines;   // dashed, labelled at the right end
  bool y_from_zero = true;        // include 0 on the y axis ...
  bool y_break = false;           // ... unless the data sits in a band under a third of its top:
                                  // then the axis starts just below the data, with a break mark
  double x_min = 0, x_max = 0;    // x range to show at least (ignored unless x_min < x_max)
};
std::string svg_line_chart(const SvgLineChart& chart, double width = 860, double height = 520);

struct SvgBarChart {
  std::string title, y_label;
  std::vector<std::string> labels;  // one bar each, labels under the bars (rotated)
  std::vector<double> values;
  std::vector<std::string> notes;   // optional text above each bar (empty: the value)
};
std::string svg_bar_chart(const SvgBarChart& chart, double width = 860, double height = 520);

// A rows x cols grid of categorical cells (0 = empty, k >= 1 = categories[k-1]).
struct SvgHeatmap {
  std::string title, row_label, col_label;
  int rows = 0, cols = 0;
  std::vector<int> cells;  // row-major, rows * cols
  std::vector<std::pair<int, std::string>> row_ticks, col_ticks;  // index -> label
  int row_mark = -1, col_mark = -1;  // >= 0: a dashed line before this row / column
  std::string mark_label;            // what the marks separate ("forward | backward")
};
struct SvgCategory {
  std::string name, color;
};
// Draws the heatmaps side by side with one shared legend for `categories`. Cells are at least
// 2 units wide, so one recomputation stays visible at 500+ nodes (the figure grows instead).
std::string svg_heatmaps(const std::string& title, const std::vector<SvgHeatmap>& maps,
                         const std::vector<SvgCategory>& categories);

}  // namespace remat
