// Validation metrics: per-sample losses in double, top-k counts, the confusion matrix.
#include "tools/training/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

double EvalMetrics::pixel_accuracy() const {
  double right = 0, all = 0;
  for (int64_t t = 0; t < classes; ++t)
    for (int64_t p = 0; p < classes; ++p) {
      const double c = confusion[static_cast<size_t>(t * classes + p)];
      all += c;
      if (t == p) right += c;
    }
  return all > 0 ? right / all : 0;
}

double EvalMetrics::mean_iou() const {
  double sum = 0;
  int present = 0;
  for (int64_t c = 0; c < classes; ++c) {
    double tp = confusion[static_cast<size_t>(c * classes + c)], fp = 0, fn = 0;
    for (int64_t o = 0; o < classes; ++o) {
      if (o == c) continue;
      fn += confusion[static_cast<size_t>(c * classes + o)];
      fp += confusion[static_cast<size_t>(o * classes + c)];
    }
    if (tp + fp + fn == 0) continue;  // absent from labels and predictions
    sum += tp / (tp + fp + fn);
    ++present;
  }
  return present > 0 ? sum / present : 0;
}

double EvalMetrics::perplexity() const { return std::exp(loss()); }

std::string EvalMetrics::describe() const {
  char buf[200];
  const char* unit = positions ? "positions" : "images";
  switch (kind) {
    case MetricKind::Classification:
      if (has_top5())
        std::snprintf(buf, sizeof buf, "val loss %.4f, top-1 %.2f%%, top-5 %.2f%% (%.0f %s)",
                      loss(), 100 * top1_rate(), 100 * top5_rate(), count, unit);
      else
        std::snprintf(buf, sizeof buf, "val loss %.4f, top-1 %.2f%% (%.0f %s)", loss(),
                      100 * top1_rate(), count, unit);
      break;
    case MetricKind::Segmentation:
      std::snprintf(buf, sizeof buf, "val loss %.4f, mean IoU %.2f%%, pixel accuracy %.2f%% (%.0f pixels)",
                    loss(), 100 * mean_iou(), 100 * pixel_accuracy(), count);
      break;
    case MetricKind::Tokens:
      std::snprintf(buf, sizeof buf, "val loss %.4f, perplexity %.2f (%.0f tokens)", loss(),
                    perplexity(), count);
      break;
  }
  return buf;
}

std::string EvalMetrics::json_fields() const {
  char buf[256];
  switch (kind) {
    case MetricKind::Classification:
      std::snprintf(buf, sizeof buf, "\"val_loss\": %.8g, \"val_top1\": %.8g", loss(),
                    top1_rate());
      if (has_top5())
        std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf),
                      ", \"val_top5\": %.8g", top5_rate());
      break;
    case MetricKind::Segmentation:
      std::snprintf(buf, sizeof buf, "\"val_loss\": %.8g, \"val_miou\": %.8g, \"val_pixel_accuracy\": %.8g",
                    loss(), mean_iou(), pixel_accuracy());
      break;
    case MetricKind::Tokens:
      std::snprintf(buf, sizeof buf, "\"val_loss\": %.8g, \"val_perplexity\": %.8g", loss(),
                    perplexity());
      break;
  }
  return std::string(buf) + ", \"val_count\": " + std::to_string(static_cast<int64_t>(count));
}

std::vector<double> EvalMetrics::to_vector() const {
  std::vector<double> v = {count, loss_sum, top1, top5};
  v.insert(v.end(), confusion.begin(), confusion.end());
  return v;
}

void EvalMetrics::add_vector(const std::vector<double>& v) {
  REMAT_CHECK(v.size() == 4 + confusion.size(), "metrics of another shape");
  count += v[0], loss_sum += v[1], top1 += v[2], top5 += v[3];
  for (size_t i = 0; i < confusion.size(); ++i) confusion[i] += v[4 + i];
}

void add_classification(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                        int64_t ignore, int64_t valid, EvalMetrics* m) {
  for (int64_t i = 0; i < std::min(n, valid); ++i) {
    const float* z = logits + i * k;
    const int32_t y = labels[i];
    if (y == ignore) continue;
    REMAT_CHECK(y >= 0 && y < k, "validation label " << y << " outside [0, " << k << ")");
    double mx = z[0];
    for (int64_t c = 1; c < k; ++c) mx = std::max(mx, static_cast<double>(z[c]));
    double s = 0;
    int64_t above = 0;
    for (int64_t c = 0; c < k; ++c) {
      s += std::exp(z[c] - mx);
      above += z[c] > z[y] || (z[c] == z[y] && c < y);
    }
    m->loss_sum += mx + std::log(s) - z[y];
    m->top1 += above < 1;
    m->top5 += above < 5;
    m->count += 1;
  }
}

void add_segmentation(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                      int64_t h, int64_t w, int64_t ignore, int64_t valid, EvalMetrics* m) {
  if (m->confusion.empty()) m->confusion.assign(static_cast<size_t>(k * k), 0.0);
  const int64_t plane = h * w;
  for (int64_t i = 0; i < std::min(n, valid); ++i)
    for (int64_t p = 0; p < plane; ++p) {
      const int32_t y = labels[i * plane + p];
      if (y == ignore) continue;
      REMAT_CHECK(y >= 0 && y < k, "validation label " << y << " outside [0, " << k << ")");
      const float* z = logits + i * k * plane + p;
      int64_t best = 0;
      double mx = z[0];
      for (int64_t c = 1; c < k; ++c)
        if (z[c * plane] > mx) mx = z[c * plane], best = c;
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += std::exp(z[c * plane] - mx);
      m->loss_sum += mx + std::log(s) - z[y * plane];
      m->confusion[static_cast<size_t>(y * k + best)] += 1;
      m->count += 1;
    }
}

void add_tokens(double mean_loss, int64_t tokens, EvalMetrics* m) {
  m->loss_sum += mean_loss * static_cast<double>(tokens);
  m->count += static_cast<double>(tokens);
}

}  // namespace remat
