// Overflow-checked arithmetic for byte counts, element counts and shapes: the one helper every
// sum and product of sizes goes through (Note [checked sizes]).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace remat {

// Note [checked sizes]
// A size read from a file or computed from one (a tensor's elements and bytes, a problem's
// constant and node bytes, a workspace, a plan's peak) must fit in [0, kMaxCount]. kMaxCount is
// 2^62 rather than INT64_MAX so that adding two checked counts (a budget and a shortfall, a
// total and one workspace) cannot overflow either. Validation at the boundary (the builder,
// problem_validate, the cost-table and plan readers) checks every sum and product of sizes
// with these functions; an out-of-range value is a UserError naming where it comes from and
// the field, so code behind the boundary may add validated sizes freely.
constexpr int64_t kMaxCount = int64_t{1} << 62;

namespace detail {
[[noreturn]] void count_out_of_range(int64_t a, char op, int64_t b, std::string_view where,
                                     std::string_view field);
}  // namespace detail

// `value` itself must lie in [0, kMaxCount]; the error names `where` and `field`.
void check_count(int64_t value, std::string_view where, std::string_view field);

// a + b and a * b for counts in [0, kMaxCount]; a result outside it is a UserError
// "<where>: field '<field>': a + b is out of range (...)". `where` may be empty.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view where, std::string_view field) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) || r > kMaxCount)
    detail::count_out_of_range(a, '+', b, where, field);
  return r;
}
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view where, std::string_view field) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > kMaxCount)
    detail::count_out_of_range(a, '*', b, where, field);
  return r;
}

// The product of `dims` (1 for none); each dimension must be >= 0.
int64_t checked_product(const std::vector<int64_t>& dims, std::string_view where,
                        std::string_view field);

}  // namespace remat
