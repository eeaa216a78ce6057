// PNG images through libpng's simplified API (libpng 1.6, Debian's
// libpng-dev): encoded in memory, then written through a temporary file and a
// rename, so a reader never sees half an image and a failed write leaves the
// previous one.
#pragma once
#include <png.h>
#include <rumus/rumus.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace example {

// An 8-bit grayscale image, rows top to bottom: width * height bytes.
inline void write_png_gray(const std::string& path, std::int64_t width, std::int64_t height,
                           const std::vector<std::uint8_t>& pixels) {
  if (width <= 0 || height <= 0 || pixels.size() != std::size_t(width * height))
    throw rumus::ValueError(fmt::format("write_png_gray: expected {} x {} = {} pixels, got {}", width, height,
                                        width * height, pixels.size()));
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = png_uint_32(width);
  image.height = png_uint_32(height);
  image.format = PNG_FORMAT_GRAY;
  // First the encoded size, then the bytes.
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr))
    throw rumus::IoError(fmt::format("cannot encode '{}' as PNG: {}", path, image.message));
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr))
    throw rumus::IoError(fmt::format("cannot encode '{}' as PNG: {}", path, image.message));
  bytes.resize(size);
  rumus::io::write_file_atomic(path, bytes);
}

}  // namespace example
