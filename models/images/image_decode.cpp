// JPEG (TurboJPEG) and PNG (libpng) decoding into 8-bit RGB or label values, with every failure
// a UserError naming the file; and the encoders the tests build their image trees with.
#include "models/images/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstring>
#include <memory>

#include "runtime/core/check.h"
#include "runtime/io/input_file.h"

namespace remat {
namespace {

bool is_jpeg(std::string_view b) {
  return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8 &&
         static_cast<uint8_t>(b[2]) == 0xFF;
}
bool is_png(std::string_view b) {
  return b.size() >= 8 && png_sig_cmp(reinterpret_cast<png_const_bytep>(b.data()), 0, 8) == 0;
}

void check_size(int64_t w, int64_t h, const std::string& path) {
  if (w < 1 || h < 1 || w > kMaxImagePixels / h)
    REMAT_USER_ERROR(path << ": image size " << w << " x " << h << " is empty or above "
                          << kMaxImagePixels << " pixels");
}

struct TjHandle {
  tjhandle h;
  explicit TjHandle(tjhandle x) : h(x) {}
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

Image decode_jpeg(std::string_view bytes, const std::string& path) {
  TjHandle tj(tjInitDecompress());
  if (!tj.h) REMAT_USER_ERROR(path << ": cannot start the JPEG decoder: " << tjGetErrorStr2(nullptr));
  auto* data = reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data()));
  const unsigned long size = static_cast<unsigned long>(bytes.size());
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, data, size, &w, &h, &subsamp, &colorspace) != 0)
    REMAT_USER_ERROR(path << ": not a readable JPEG: " << tjGetErrorStr2(tj.h));
  if (w < 1 || h < 1)  // the header ended before the frame's size (a truncated file)
    REMAT_USER_ERROR(path << ": not a readable JPEG: no image size in its header (truncated or "
                             "corrupt, " << bytes.size() << " bytes)");
  check_size(w, h, path);
  Image img;
  img.width = w, img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<uint8_t> four(cmyk ? static_cast<size_t>(w) * h * 4 : 0);
  // Warnings (a premature end of data, corrupt entropy data) stop the decode: never half an image.
  if (tjDecompress2(tj.h, data, size, cmyk ? four.data() : img.rgb.data(), w, 0, h,
                    cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_ACCURATEDCT) != 0)
    REMAT_USER_ERROR(path << ": corrupt or truncated JPEG: " << tjGetErrorStr2(tj.h));
  for (size_t p = 0; cmyk && p < static_cast<size_t>(w) * h; ++p) {
    const unsigned k = four[4 * p + 3];
    for (int c = 0; c < 3; ++c) img.rgb[3 * p + c] = static_cast<uint8_t>(four[4 * p + c] * k / 255);
  }
  return img;
}

Image decode_png(std::string_view bytes, const std::string& path) {
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, bytes.data(), bytes.size()))
    REMAT_USER_ERROR(path << ": not a readable PNG: " << im.message);
  const int64_t w = im.width, h = im.height;
  if (w < 1 || h < 1 || w > kMaxImagePixels / h) {
    png_image_free(&im);
    check_size(w, h, path);
  }
  im.format = PNG_FORMAT_RGBA;  // alpha read, then dropped as PIL's convert("RGB") drops it
  std::vector<uint8_t> rgba(static_cast<size_t>(w) * h * 4);
  if (!png_image_finish_read(&im, nullptr, rgba.data(), 0, nullptr))
    REMAT_USER_ERROR(path << ": corrupt or truncated PNG: " << im.message);
  Image img;
  img.width = w, img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (size_t p = 0; p < static_cast<size_t>(w) * h; ++p)
    std::memcpy(&img.rgb[3 * p], &rgba[4 * p], 3);
  return img;
}

// libpng's low-level reader over memory, for label maps (the simplified API would replace
// palette indices by colours). Errors longjmp back into read_label_png, which holds no object
// with a destructor while libpng runs.
struct PngMemory {
  std::string_view bytes;
  size_t at = 0;
  char message[256] = {};
};

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* m = static_cast<PngMemory*>(png_get_io_ptr(png));
  if (n > m->bytes.size() - m->at) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(out, m->bytes.data() + m->at, n);
  m->at += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* m = static_cast<PngMemory*>(png_get_error_ptr(png));
  std::snprintf(m->message, sizeof m->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// Returns "" and fills `out` (rows of `width` values), or the reason it failed.
std::string read_label_png(PngMemory* mem, int64_t* width, int64_t* height,
                           std::vector<int32_t>* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, mem, png_on_error, png_on_warning);
  if (!png) return "cannot start the PNG reader";
  png_infop info = png_create_info_struct(png);
  // Heap objects made before setjmp: a longjmp out of libpng skips no destructor.
  auto* rows_data = new std::vector<uint8_t>();
  auto* rows = new std::vector<png_bytep>();
  std::string why;
  if (setjmp(png_jmpbuf(png))) {
    why = mem->message[0] ? mem->message : "corrupt PNG";
  } else {
    png_set_read_fn(png, mem, png_read_memory);
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    const int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (type != PNG_COLOR_TYPE_PALETTE && type != PNG_COLOR_TYPE_GRAY) {
      why = "a label map must be a palette or grey-scale PNG (its values are the labels); this "
            "one has colour type " + std::to_string(type);
    } else if (w < 1 || h < 1 || static_cast<int64_t>(w) > kMaxImagePixels / h) {
      why = "image size " + std::to_string(w) + " x " + std::to_string(h) + " is empty or too large";
    } else {
      if (depth < 8) png_set_packing(png);  // 1, 2, 4-bit indices or values to bytes
      if (depth == 16) png_set_swap(png);   // host-order 16-bit grey values
      png_read_update_info(png, info);
      const size_t row_bytes = png_get_rowbytes(png, info);
      rows_data->resize(row_bytes * h);
      rows->resize(h);
      for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = rows_data->data() + row_bytes * y;
      png_read_image(png, rows->data());
      png_read_end(png, nullptr);
      *width = w, *height = h;
      out->resize(static_cast<size_t>(w) * h);
      for (size_t p = 0; p < out->size(); ++p)
        (*out)[p] = depth == 16 ? reinterpret_cast<const uint16_t*>(rows_data->data())[p]
                                : (*rows_data)[p];
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  delete rows_data;
  delete rows;
  return why;
}

}  // namespace

Image decode_image(std::string_view bytes, const std::string& path) {
  if (is_jpeg(bytes)) return decode_jpeg(bytes, path);
  if (is_png(bytes)) return decode_png(bytes, path);
  REMAT_USER_ERROR(path << ": not a JPEG or PNG file (" << bytes.size() << " bytes; images are "
                        << "read by their content, not their extension)");
}

LabelMap decode_label_map(std::string_view bytes, const std::string& path) {
  if (!is_png(bytes))
    REMAT_USER_ERROR(path << ": a label map must be a PNG file (" << bytes.size() << " bytes)");
  PngMemory mem{bytes};
  LabelMap m;
  const std::string why = read_label_png(&mem, &m.width, &m.height, &m.labels);
  if (!why.empty()) REMAT_USER_ERROR(path << ": " << why);
  return m;
}

Image load_image(const std::string& path) { return decode_image(read_file(path, "image"), path); }

LabelMap load_label_map(const std::string& path) {
  return decode_label_map(read_file(path, "label map"), path);
}

std::string encode_png(const uint8_t* pixels, int64_t width, int64_t height, int channels) {
  REMAT_CHECK(channels == 1 || channels == 3, "encode_png: 1 or 3 channels");
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(width);
  im.height = static_cast<png_uint_32>(height);
  im.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  REMAT_CHECK(png_image_write_get_memory_size(im, size, 0, pixels, 0, nullptr),
              "encode_png: " << im.message);
  std::string out(size, '\0');
  REMAT_CHECK(png_image_write_to_memory(&im, out.data(), &size, 0, pixels, 0, nullptr),
              "encode_png: " << im.message);
  out.resize(size);
  return out;
}

std::string encode_palette_png(const uint8_t* indices, int64_t width, int64_t height) {
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(width);
  im.height = static_cast<png_uint_32>(height);
  im.format = PNG_FORMAT_RGB_COLORMAP;
  im.colormap_entries = 256;
  std::vector<uint8_t> palette(256 * 3);
  for (int i = 0; i < 256; ++i) palette[3 * i] = palette[3 * i + 1] = palette[3 * i + 2] = static_cast<uint8_t>(255 - i);
  png_alloc_size_t size = 0;
  REMAT_CHECK(png_image_write_get_memory_size(im, size, 0, indices, 0, palette.data()),
              "encode_palette_png: " << im.message);
  std::string out(size, '\0');
  REMAT_CHECK(png_image_write_to_memory(&im, out.data(), &size, 0, indices, 0, palette.data()),
              "encode_palette_png: " << im.message);
  out.resize(size);
  return out;
}

std::string encode_jpeg(const uint8_t* pixels, int64_t width, int64_t height, int channels,
                        int quality) {
  REMAT_CHECK(channels == 1 || channels == 3 || channels == 4, "encode_jpeg: 1, 3 or 4 (CMYK) channels");
  TjHandle tj(tjInitCompress());
  REMAT_CHECK(tj.h, "encode_jpeg: " << tjGetErrorStr2(nullptr));
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int format = channels == 1 ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_CMYK;
  const int subsamp = channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  REMAT_CHECK(tjCompress2(tj.h, pixels, static_cast<int>(width), 0, static_cast<int>(height),
                          format, &buf, &size, subsamp, quality, TJFLAG_ACCURATEDCT) == 0,
              "encode_jpeg: " << tjGetErrorStr2(tj.h));
  std::string out(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  return out;
}

}  // namespace remat
