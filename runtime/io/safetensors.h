// safetensors files (the format of Hugging Face's `safetensors`, readable by PyTorch): weights
// and checkpoints. Layout: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ..., "__metadata__": {..}},
// then the raw tensor data; offsets are relative to the start of the data section.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/tensor.h"

namespace remat {

struct SafeTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> data;  // shape_numel(shape) * dtype_size(dtype) bytes, little-endian

  // Copies of the data as values (checks the dtype).
  std::vector<float> f32() const;
  std::vector<int32_t> i32() const;
};

// Builds a tensor from host values (values.size() must equal the shape's element count).
SafeTensor safetensor_f32(const std::string& name, const Shape& shape,
                          const std::vector<float>& values);
SafeTensor safetensor_i32(const std::string& name, const Shape& shape,
                          const std::vector<int32_t>& values);

struct SafeTensorFile {
  std::vector<SafeTensor> tensors;  // in data order (the order they were saved)
  std::map<std::string, std::string> metadata;  // without the checksum entries
  std::vector<std::string> unverified;  // tensors the file has no checksum for (load only)
  // The tensor named `name`, or nullptr.
  const SafeTensor* find(const std::string& name) const;
};

// Writes `tensors` (in this order, data contiguous) and `metadata` atomically, with each
// tensor's CRC-32C in the metadata unless `checksums` is false (Note [tensor checksums] in
// safetensors.cpp; `export` writes weights for other readers without them): to
// path + ".tmp", fsync, rename over `path`, fsync the directory, so a crash leaves either the
// old file or the new one. The header is padded with spaces to a multiple of 8 bytes.
// Throws Error for invalid tensors (duplicate or reserved name, data size not matching the
// shape), for metadata keys starting with "checksum.", and UserError naming the path when the
// file cannot be written.
void safetensors_save(const std::string& path, const std::vector<SafeTensor>& tensors,
                      const std::map<std::string, std::string>& metadata, bool checksums = true);

// Reads and validates a whole file: header length within the file, valid JSON, known dtypes
// (F32, I32), shapes, offsets inside the data section, not overlapping and matching
// shape * dtype size, no duplicate names, string metadata, and every stored checksum matching
// its tensor's data (a flipped bit is an error; a tensor without a checksum is listed in
// `unverified`). Every failure is a UserError that names the file and, where there is one, the
// tensor.
SafeTensorFile safetensors_load(const std::string& path);
// The same from the bytes of a file; `path` names it in errors.
SafeTensorFile safetensors_parse(std::string_view bytes, const std::string& path);

}  // namespace remat
