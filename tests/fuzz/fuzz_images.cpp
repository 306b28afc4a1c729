// libFuzzer harness: the image decoders on arbitrary bytes, as the folder and segmentation
// sources read files: JPEG (TurboJPEG) and PNG (libpng's simplified API) into RGB, and PNG
// label maps (libpng's low-level reader), all under kMaxImagePixels.
#include <string_view>

#include "models/images/image_decode.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remat;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fuzz::user_errors_only([&] {
    const Image img = decode_image(bytes, "fuzz.img");
    if (img.width < 1 || img.height < 1 || img.width * img.height > kMaxImagePixels ||
        img.rgb.size() != static_cast<size_t>(img.width * img.height * 3))
      __builtin_trap();  // an image returned must be whole and within the limit
  });
  fuzz::user_errors_only([&] {
    const LabelMap map = decode_label_map(bytes, "fuzz.png");
    if (map.width < 1 || map.height < 1 || map.width * map.height > kMaxImagePixels ||
        map.labels.size() != static_cast<size_t>(map.width * map.height))
      __builtin_trap();
  });
  return 0;
}
