// libFuzzer harness: the safetensors reader (header, offsets, checksums) on arbitrary bytes, and
// the values of every tensor it accepts.
#include "runtime/io/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  fuzz::user_errors_only([&] {
    const SafeTensorFile f =
        safetensors_parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.st");
    for (const SafeTensor& t : f.tensors) t.dtype == DType::F32 ? (void)t.f32() : (void)t.i32();
  });
  return 0;
}
