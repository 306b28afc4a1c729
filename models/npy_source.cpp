// Arrays from NumPy's .npy files as a DataSource: inputs [S, ...] of any float input and labels
// [S, ...] of any loss, checked when opened, served per epoch (Note [npy data]).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <sstream>

#include "models/data.h"
#include "models/epoch_order.h"
#include "models/npy.h"
#include "models/sample_threads.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

// Note [npy data]
// `{source: npy, inputs: x.npy, labels: y.npy}`: sample s is inputs[s] and labels[s], the
// arrays' first axis the samples. inputs[s] has the model's per-sample input shape (an image
// [C, H, W], features [F], a sequence [T, F]) in float16, float32 or float64, each value rounded
// to the batch's float32 once (float64 beyond float32's range, NaN or infinity: an error naming
// the file, sample and element, when the sample is served); labels[s] has the loss's shape per
// sample ([] one class, [T'] a class per position, [H, W] per pixel), any integer type (or
// integral floats), every label in [0, classes) or the loss's ignore_index, all checked when
// the files open. Training serves the samples in a permutation per epoch drawn from `seed`
// (as an image folder does); validation serves them in order, so a pass covers each once.
class NpySource final : public DataSource {
 public:
  NpySource(const std::string& inputs, const std::string& labels, const TensorDesc& in,
            const TensorDesc& lab, int64_t classes, int64_t ignore, uint64_t seed,
            const DataShard& shard, const LoaderOptions& opt)
      : x_(inputs), y_(labels), n_(in.shape.at(0)), shard_(shard), opt_(opt), seed_(seed) {
    check_shapes(in, lab);
    count_ = x_.header().shape[0];
    per_x_ = shape_numel(Shape(in.shape.begin() + 1, in.shape.end()));
    per_y_ = shape_numel(Shape(lab.shape.begin() + 1, lab.shape.end()));
    check_labels(classes, ignore);
    order_.emplace(count_, seed_, !opt_.evaluation);
  }

  void next_batch(int64_t step, void* input, int32_t* labels) override {
    const int64_t global = shard_.global_batch > 0 ? shard_.global_batch : n_;
    fill_samples(n_, opt_.threads, [&](int64_t i) {
      const int64_t s = order_->at(step * global + shard_.first + i);
      float* x = static_cast<float*>(input) + i * per_x_;
      x_.floats(s * per_x_, per_x_, x);
      bool finite = true;  // one vectorized pass; the element named only when one is not
      for (int64_t e = 0; e < per_x_; ++e) finite &= std::fabs(x[e]) <= FLT_MAX;
      for (int64_t e = 0; !finite && e < per_x_; ++e) {
        if (std::fabs(x[e]) <= FLT_MAX) continue;
        const double v = x_.real(s * per_x_ + e);
        REMAT_USER_ERROR(x_.path() << ": sample " << s << ", element " << e << " is " << v
                                   << (std::isfinite(v) ? " (beyond float32's range)" : ""));
      }
      for (int64_t e = 0; e < per_y_; ++e)
        labels[i * per_y_ + e] = static_cast<int32_t>(y_.integer(s * per_y_ + e));
    });
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "npy: " << count_ << " samples from " << x_.describe() << " and " << y_.describe()
       << (opt_.evaluation ? ", in order" : ", shuffled per epoch (seed " + std::to_string(seed_) + ")")
       << data_shard_describe(shard_, n_);
    return os.str();
  }
  int64_t size() const override { return count_; }

 private:
  void check_shapes(const TensorDesc& in, const TensorDesc& lab) const {
    const Shape& xs = x_.header().shape;
    const Shape& ys = y_.header().shape;
    const Shape want_x(in.shape.begin() + 1, in.shape.end());
    const Shape want_y(lab.shape.begin() + 1, lab.shape.end());
    if (!npy_is_float(x_.header().type))
      REMAT_USER_ERROR(x_.describe() << ": inputs must be floats (float16, float32 or float64)");
    if (xs.empty() || Shape(xs.begin() + 1, xs.end()) != want_x)
      REMAT_USER_ERROR(x_.describe() << ": inputs must be [S, " << dims(want_x)
                                     << "], S samples of the model's input " << shape_str(want_x));
    if (xs[0] < 1) REMAT_USER_ERROR(x_.describe() << ": no samples");
    if (ys.empty() || Shape(ys.begin() + 1, ys.end()) != want_y)
      REMAT_USER_ERROR(y_.describe() << ": labels must be [S" << (want_y.empty() ? "" : ", ")
                                     << dims(want_y) << "] for the loss's labels "
                                     << shape_str(lab.shape) << " per batch");
    if (ys[0] != xs[0])
      REMAT_USER_ERROR(y_.describe() << ": " << ys[0] << " samples of labels, " << xs[0]
                                     << " of inputs in " << x_.path());
  }
  static std::string dims(const Shape& s) {
    std::string out;
    for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
    return out;
  }

  void check_labels(int64_t classes, int64_t ignore) const {
    const int64_t total = count_ * per_y_;
    for (int64_t e = 0; e < total; ++e) {
      const int64_t v = y_.integer(e);
      if ((v >= 0 && v < classes) || v == ignore) continue;
      REMAT_USER_ERROR(y_.path() << ": sample " << e / std::max<int64_t>(per_y_, 1)
                                 << (per_y_ > 1 ? ", label " + std::to_string(e % per_y_) : "")
                                 << " is " << (npy_is_float(y_.header().type)
                                                   ? std::to_string(y_.real(e))
                                                   : std::to_string(v))
                                 << ", not a class in [0, " << classes << ")"
                                 << (ignore != kNoIgnoreIndex
                                         ? " or the ignore_index " + std::to_string(ignore)
                                         : ""));
    }
  }

  NpyFile x_, y_;
  int64_t n_, count_ = 0, per_x_ = 0, per_y_ = 0;
  DataShard shard_;
  LoaderOptions opt_;
  uint64_t seed_;
  std::optional<EpochOrder> order_;  // once the sample count is known
};

}  // namespace

std::unique_ptr<DataSource> make_npy_source(const std::string& inputs, const std::string& labels,
                                            const TensorDesc& input, const TensorDesc& label_desc,
                                            int64_t classes, int64_t ignore, uint64_t seed,
                                            const DataShard& shard, const LoaderOptions& opt) {
  return std::make_unique<NpySource>(inputs, labels, input, label_desc, classes, ignore, seed,
                                     shard, opt);
}

}  // namespace remat
