// Helpers every op suite shares: the builtin registry, the UserError message of a call or of
// building a harness for a case, substring and elementwise-closeness expectations.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ops/registry.h"
#include "runtime/core/check.h"
#include "tests/op_harness.h"

namespace remat {

inline const OpRegistry& builtin_registry() {
  static const OpRegistry r = make_builtin_registry();
  return r;
}

// The message of the UserError `f` throws ("<no error>" when it throws nothing, "<not a
// UserError>" for any other exception).
inline std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (...) {
    return "<not a UserError>";
  }
  return "<no error>";
}

// The message of constructing a harness for `c` (parse + infer errors).
inline std::string case_error(OpCase c) {
  return user_error([&] { OpHarness h(builtin_registry(), c); });
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// |got[i] - want[i]| <= tol * max(1, |want[i]|) for every element.
inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& want,
                            double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

// Distinct, well-separated values (no pooling ties within eps): a permutation of 0..n-1, x0.1.
inline std::vector<float> distinct_values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    v[static_cast<size_t>(j)] = 0.1f * static_cast<float>((j * 37) % n) - 0.05f * n;
  return v;
}

}  // namespace remat
