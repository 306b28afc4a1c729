// Image datasets on disk as DataSources: class folders (ImageNet's layout, as torchvision's
// ImageFolder reads it) and segmentation pairs (an image and its PNG label map, VOC's and
// Cityscapes' layouts). Samples are decoded (models/images/image_decode.h) and transformed
// (transforms.h) by a pool of threads per batch.
//
// Order: a training source shuffles every epoch (a permutation drawn from (seed, epoch));
// sample i of step s is position p = s G + first + i of the endless sequence of epochs (G the
// global batch, first the rank's offset: models/data.h's DataShard), and its crop and flip are
// drawn from (seed, s, first + i). So a batch depends only on the step, whatever the threads,
// and a resumed or data-parallel run sees exactly the samples one uninterrupted process sees.
// An evaluation source (val) serves the samples in their sorted order, wrapping around.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/data.h"

namespace remat {

struct ImageSample {
  std::string image;
  std::string label;       // segmentation: the label map's path; "" for classification
  int32_t cls = 0;         // classification: the class index
  std::string unreadable;  // the scan's reason a file of the sample cannot be read (a broken
                           // symbolic link, named in it); "" when there is none
};

// root/<class>/.../<image>: classes are root's sub-folders sorted by name (index = rank),
// images the .jpg/.jpeg/.png files under each (any depth, sorted paths; other files are
// skipped). Symbolic links are followed (Note [links in image folders] in image_source.cpp):
// an image link that cannot be followed is a sample with `unreadable` set. UserError for a
// missing root, no class folder, a class folder with no image, or a link that leads back to a
// folder containing it (naming the link and the folder).
std::vector<ImageSample> scan_image_folder(const std::string& root, std::vector<std::string>* classes);

// Label maps (*.png) of `labels` sorted, each paired with the image of the same stem in
// `images` (.jpg, .jpeg or .png); or the "image label" lines of `list` (paths relative to the
// list file's folder; blank lines and # comments skipped). UserError naming the file, line
// or image without a label. The folders' links are followed as scan_image_folder follows them.
std::vector<ImageSample> scan_segmentation_folders(const std::string& images, const std::string& labels);
std::vector<ImageSample> read_segmentation_list(const std::string& list);

// classes: the model's classes; labels must be in [0, classes) or equal `ignore_index` (a
// segmentation loss's, kNoIgnoreIndex when it has none); a label map's other values are
// errors naming the file and pixel (kNoIgnoreIndex: models/config.h). A sample with
// `unreadable` set is a UserError here, or with opt.skip_bad_samples a bad sample when read.
std::unique_ptr<DataSource> make_image_source(std::vector<ImageSample> samples, std::string what,
                                              const DataConfig& d, int64_t classes,
                                              int64_t ignore_index, const TensorDesc& input,
                                              const TensorDesc& labels, const DataShard& shard,
                                              const LoaderOptions& opt);

}  // namespace remat
