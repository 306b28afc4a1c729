// Validation metrics, accumulated on the host batch by batch: loss and top-1 / top-5 accuracy
// (classification, from the logits), loss, pixel accuracy and mean IoU (segmentation, from a
// confusion matrix), loss and perplexity (token models, from the graph's loss). Sums, so that
// data-parallel ranks add theirs (to_vector / add_vector) before the rates are taken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace remat {

enum class MetricKind { Classification, Segmentation, Tokens };

struct EvalMetrics {
  MetricKind kind = MetricKind::Classification;
  bool positions = false;  // classification at each position of a float sequence
  int64_t classes = 0;
  double count = 0;     // samples, counted pixels or tokens
  double loss_sum = 0;  // their losses' sum
  double top1 = 0, top5 = 0;        // classification: correct within the top 1 / 5
  std::vector<double> confusion;    // segmentation: [true class][predicted class], classes^2

  double loss() const { return count > 0 ? loss_sum / count : 0; }
  double top1_rate() const { return count > 0 ? top1 / count : 0; }
  double top5_rate() const { return count > 0 ? top5 / count : 0; }
  // Top-5 says something only with more than 5 classes (with 5 or fewer it is always 100 %).
  bool has_top5() const { return kind == MetricKind::Classification && classes > 5; }
  double pixel_accuracy() const;
  // Mean over the classes that occur (in the labels or the predictions) of TP / (TP + FP + FN).
  double mean_iou() const;
  double perplexity() const;
  // One line for the log: "val loss 1.2345, top-1 45.60%, top-5 78.90% (5000 images)" (top-5
  // only with more than 5 classes; "positions" for a sequence's).
  std::string describe() const;

  // The --metrics and --summary fields: {"val_loss", "val_top1", "val_top5"} (classification;
  // val_top5 only with more than 5 classes),
  // {"val_loss", "val_miou", "val_pixel_accuracy"}, {"val_loss", "val_perplexity"}, and
  // "val_count" (images, pixels or tokens); rates as fractions.
  std::string json_fields() const;

  std::vector<double> to_vector() const;          // every sum, in a fixed order
  void add_vector(const std::vector<double>& v);  // adds another's to_vector()
};

// Classification: logits [n, k] (row-major) and labels [n]; the first `valid` rows count (a last
// batch that wraps around repeats samples already counted). Loss per sample: log-sum-exp minus
// the label's logit, in double. Top-k: fewer than k classes rank above the label, a class
// ranking above it when its logit is larger, or equal with a lower index (an argmax's tie
// rule: the first largest). Rows labelled `ignore` do not count (a value outside [0, k) when
// there is none; token_xent's -100 at a position of a sequence).
void add_classification(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                        int64_t ignore, int64_t valid, EvalMetrics* m);
// Segmentation: logits [n, k, h, w], labels [n, h, w]; pixels labelled `ignore` do not count
// (pass a value outside [0, k) when there is none). Prediction: the first largest logit.
void add_segmentation(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                      int64_t h, int64_t w, int64_t ignore, int64_t valid, EvalMetrics* m);
// Token models: a batch's mean loss over `tokens` tokens.
void add_tokens(double mean_loss, int64_t tokens, EvalMetrics* m);

}  // namespace remat
