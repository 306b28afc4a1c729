// Image files as pixels: JPEG through libjpeg-turbo (TurboJPEG), PNG through libpng. Colour
// images come out as 8-bit RGB, rows top to bottom, interleaved (HWC) — as PIL's
// Image.convert("RGB") gives them to torchvision: grey-scale is replicated into three channels, a
// PNG's alpha is dropped (not composited), a palette is expanded, a CMYK or YCCK JPEG is
// converted as R = C K / 255 (Adobe's inverted CMYK, what such files store). Label maps (PNG
// only) come out as their stored values: a palette image's indices (VOC) or a grey image's
// values (Cityscapes' *_labelIds.png), never the palette's colours.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace remat {

struct Image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};

struct LabelMap {
  int64_t width = 0, height = 0;
  std::vector<int32_t> labels;  // height * width
};

// Decodes a whole file's bytes; the format is told by its first bytes (JPEG: FF D8 FF; PNG: the
// PNG signature). A truncated or corrupt file, an unknown format, a zero or absurd size
// (above kMaxImagePixels) are UserErrors naming `path` and what is wrong. Libjpeg-turbo's
// warnings (a premature end of data) are errors too: a half-decoded image is never returned.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;
Image decode_image(std::string_view bytes, const std::string& path);
LabelMap decode_label_map(std::string_view bytes, const std::string& path);

// Reads `path` whole and decodes it (UserError naming the file when it cannot be read).
Image load_image(const std::string& path);
LabelMap load_label_map(const std::string& path);

// Encoders for tests and tools: 8-bit RGB (or grey when `channels` is 1) as PNG, and as a
// baseline JPEG of `quality`; a label map as an 8-bit grey PNG (values must be in [0, 255]).
std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels);
// channels 4: CMYK (as Adobe stores it).
std::string encode_jpeg(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                        int quality);
// A palette PNG of `indices` (VOC's label maps), the palette a grey ramp of 256 colours.
std::string encode_palette_png(const uint8_t* indices, int64_t width, int64_t height);

}  // namespace remat
