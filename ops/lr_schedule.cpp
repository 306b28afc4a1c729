// Learning-rate schedule and clipping settings shared by the optimizer ops (lr_schedule.h).
#include "ops/lr_schedule.h"

#include <cmath>

namespace remat {

LrSchedule parse_lr_schedule(AttrReader& r, double default_lr) {
  LrSchedule s;
  s.lr = r.get_double("lr", default_lr, 0.0, 1e6);
  s.warmup_steps = r.get_int("warmup_steps", 0, 0, int64_t{1} << 40);
  s.cosine = r.get_choice("schedule", "constant", {"constant", "cosine"}) == "cosine";
  s.min_lr = r.get_double("min_lr", 0.0, 0.0, 1e6);
  if (s.cosine) {
    if (!r.has("decay_steps")) r.fail("schedule", "cosine needs decay_steps (the step lr reaches min_lr)");
    s.decay_steps = r.get_int("decay_steps", 0, 1, int64_t{1} << 40);
    if (s.decay_steps <= s.warmup_steps)
      r.fail("decay_steps", "must be greater than warmup_steps (" +
                                std::to_string(s.warmup_steps) + ")");
    if (s.min_lr > s.lr) r.fail("min_lr", "must not exceed lr");
  } else {
    for (const char* k : {"decay_steps", "min_lr"})
      if (r.has(k)) r.fail(k, "needs schedule: cosine");
  }
  s.clip_norm = r.get_double("clip_norm", 0.0, 0.0, 1e12);
  return s;
}

double lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps)
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (!s.cosine) return s.lr;
  if (step >= s.decay_steps) return s.min_lr;
  const double ratio = static_cast<double>(step - s.warmup_steps) /
                       static_cast<double>(s.decay_steps - s.warmup_steps);
  return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * ratio));
}

}  // namespace remat
