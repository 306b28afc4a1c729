// libFuzzer harness: the .npy reader (Note [npy files]) on arbitrary bytes, and every element of
// each array it accepts, as a real and as an integer, and a float array's elements as one run.
#include <vector>

#include "models/npy.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  fuzz::user_errors_only([&] {
    const NpyView v(data, size, "fuzz.npy");
    const int64_t n = v.header().count();
    for (int64_t i = 0; i < n; ++i) (void)v.real(i), (void)v.integer(i);
    if (!npy_is_float(v.header().type)) return;
    std::vector<float> run(static_cast<size_t>(n));
    v.floats(0, n, run.data());
  });
  return 0;
}
