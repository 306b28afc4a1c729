// The error path of the checked size arithmetic (runtime/core/checked.h).
#include "runtime/core/checked.h"

#include <sstream>

#include "runtime/core/check.h"

namespace remat {

namespace {
std::string prefix(std::string_view where, std::string_view field) {
  std::string s;
  if (!where.empty()) s.append(where).append(": ");
  if (!field.empty()) s.append("field '").append(field).append("': ");
  return s;
}
}  // namespace

namespace detail {
void count_out_of_range(int64_t a, char op, int64_t b, std::string_view where,
                        std::string_view field) {
  REMAT_USER_ERROR(prefix(where, field)
                   << a << " " << op << " " << b
                   << " is out of range (sizes and counts must lie in [0, 2^62 = " << kMaxCount
                   << "])");
}
}  // namespace detail

void check_count(int64_t value, std::string_view where, std::string_view field) {
  if (value < 0 || value > kMaxCount)
    REMAT_USER_ERROR(prefix(where, field) << value << " is out of range (sizes and counts must lie "
                                              "in [0, 2^62 = "
                                          << kMaxCount << "])");
}

int64_t checked_product(const std::vector<int64_t>& dims, std::string_view where,
                        std::string_view field) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      std::ostringstream os;
      for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
      REMAT_USER_ERROR(prefix(where, field) << "shape [" << os.str()
                                            << "] has a negative dimension");
    }
    n = checked_mul(n, d, where, field);
  }
  return n;
}

}  // namespace remat
