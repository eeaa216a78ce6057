// Checks a PNG file a trainer wrote: libpng decodes all of it (signature,
// chunks, checksums, image data), it is WIDTH x HEIGHT pixels, and it is not
// one flat colour (a grid of images has both dark and light pixels).
// Usage: check_png FILE WIDTH HEIGHT; prints what is wrong and exits 1, else exits 0.
#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: check_png FILE WIDTH HEIGHT\n");
    return 2;
  }
  const unsigned long width = std::strtoul(argv[2], nullptr, 10), height = std::strtoul(argv[3], nullptr, 10);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, argv[1])) {
    std::fprintf(stderr, "check_png: '%s' is not a readable PNG: %s\n", argv[1], image.message);
    return 1;
  }
  if (image.width != width || image.height != height) {
    std::fprintf(stderr, "check_png: '%s' is %u x %u pixels, expected %lu x %lu\n", argv[1], image.width, image.height,
                 width, height);
    png_image_free(&image);
    return 1;
  }
  image.format = PNG_FORMAT_GRAY;
  std::vector<png_byte> pixels(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
    std::fprintf(stderr, "check_png: cannot decode '%s': %s\n", argv[1], image.message);
    return 1;
  }
  const auto [lo, hi] = std::minmax_element(pixels.begin(), pixels.end());
  if (*hi - *lo < 64) {
    std::fprintf(stderr, "check_png: '%s' is nearly flat: pixel values %d to %d\n", argv[1], *lo, *hi);
    return 1;
  }
  std::printf("check_png: '%s': %u x %u pixels, values %d to %d\n", argv[1], image.width, image.height, *lo, *hi);
  return 0;
}
