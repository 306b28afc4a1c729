// libFuzzer harness: the .npy reader (Note [npy files]) on arbitrary bytes, and every element of
// each array it accepts, as a real and as an integer.
#include "models/npy.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  fuzz::user_errors_only([&] {
    const NpyView v(data, size, "fuzz.npy");
    for (int64_t i = 0; i < v.header().count(); ++i) (void)v.real(i), (void)v.integer(i);
  });
  return 0;
}
