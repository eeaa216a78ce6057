#include "rumus/data/idx.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "rumus/ops/creation.hpp"

namespace rumus::data {

namespace {
// Files larger than this are refused before anything is read: MNIST's
// largest is 47 MB, and a corrupt or hostile header must not make a tiny
// .gz inflate into gigabytes.
constexpr std::uint64_t kMaxDataBytes = std::uint64_t(1) << 34;

using GzFile = std::unique_ptr<gzFile_s, int (*)(gzFile)>;

[[noreturn]] void corrupt(const std::string& path, gzFile f) {
  int code = 0;
  const char* msg = gzerror(f, &code);
  throw IoError(fmt::format("read_idx: '{}' is corrupt or truncated: {}", path, msg));
}

// Reads up to n bytes; fewer only at the end of the data.
std::uint64_t read_some(const std::string& path, gzFile f, unsigned char* out, std::uint64_t n) {
  std::uint64_t got = 0;
  while (got < n) {
    unsigned want = unsigned(std::min<std::uint64_t>(n - got, 1u << 30));
    int r = gzread(f, out + got, want);
    if (r < 0) corrupt(path, f);
    if (r == 0) break;
    got += std::uint64_t(r);
  }
  return got;
}

std::uint32_t be32(const unsigned char* p) {
  return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
}
}  // namespace

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw IoError(fmt::format("read_idx: expected a file, got the directory '{}'", path));
  gzFile raw = gzopen(path.c_str(), "rb");
  if (!raw) throw IoError(fmt::format("read_idx: cannot open '{}': {}", path, std::strerror(errno)));
  GzFile f(raw, gzclose);
  gzbuffer(raw, 1 << 17);

  // The header first: magic, type, dims, and the data size they imply.
  unsigned char b[4 + 4 * 255];
  std::uint64_t n = read_some(path, raw, b, 4);
  if (n < 4) throw IoError(fmt::format("read_idx: '{}' is truncated: {} bytes, no IDX header", path, n));
  if (b[0] != 0 || b[1] != 0)
    throw IoError(fmt::format("read_idx: '{}' has a wrong magic number 0x{:02x}{:02x}{:02x}{:02x} (expected 0x0000 "
                              "followed by a type code and the number of dims)",
                              path, b[0], b[1], b[2], b[3]));
  DType dt;
  switch (b[2]) {
    case 0x08: dt = DType::u8; break;
    case 0x0C: dt = DType::i32; break;
    case 0x0D: dt = DType::f32; break;
    case 0x0E: dt = DType::f64; break;
    default:
      throw IoError(fmt::format("read_idx: '{}' has unsupported type code 0x{:02x} (expected 0x08 u8, 0x0C i32, "
                                "0x0D f32 or 0x0E f64)",
                                path, b[2]));
  }
  const std::size_t ndim = b[3];
  if (ndim == 0 || ndim > 8) throw IoError(fmt::format("read_idx: '{}' declares {} dims (expected 1 to 8)", path, ndim));
  const std::size_t header = 4 + 4 * ndim;
  n = 4 + read_some(path, raw, b + 4, header - 4);
  if (n < header)
    throw IoError(fmt::format("read_idx: '{}' is truncated inside its header ({} of {} bytes)", path, n, header));
  Shape shape;
  std::uint64_t want = dtype_size(dt);  // data bytes, checked for overflow dim by dim
  bool overflow = false;
  for (std::size_t d = 0; d < ndim; ++d) {
    const std::uint32_t dim = be32(&b[4 + 4 * d]);
    shape.push_back(dim);
    if (dim != 0 && want > UINT64_MAX / dim) overflow = true;
    if (!overflow) want *= dim;
  }
  if (overflow)
    throw IoError(fmt::format("read_idx: '{}' declares shape {} of {}, whose byte count overflows 64 bits", path,
                              shape_str(shape), dtype_name(dt)));
  if (want > kMaxDataBytes)
    throw IoError(fmt::format("read_idx: '{}' declares shape {} of {}: {} data bytes, more than the limit of {}",
                              path, shape_str(shape), dtype_name(dt), want, kMaxDataBytes));

  // Then exactly the data, in growing steps, so a header that claims more
  // than the file holds costs no more memory than the file's real content.
  std::vector<unsigned char> data;
  std::uint64_t have = 0;
  while (have < want) {
    std::uint64_t step = std::min<std::uint64_t>(want - have, std::max<std::uint64_t>(have, 1 << 20));
    data.resize(have + step);
    std::uint64_t got = read_some(path, raw, data.data() + have, step);
    have += got;
    if (got < step) break;
  }
  if (have < want)
    throw IoError(fmt::format("read_idx: '{}' is truncated: shape {} needs {} data bytes, found {}", path,
                              shape_str(shape), want, have));
  unsigned char extra[1 << 12];
  std::uint64_t trailing = 0;
  for (std::uint64_t got; (got = read_some(path, raw, extra, sizeof extra)) > 0 && trailing < (1u << 20);)
    trailing += got;
  if (trailing > 0)
    throw IoError(fmt::format("read_idx: '{}' has {}{} bytes after the {} data bytes of shape {}", path,
                              trailing >= (1u << 20) ? "at least " : "", trailing, want, shape_str(shape)));
  int code = 0;
  const char* msg = gzerror(raw, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw IoError(fmt::format("read_idx: '{}' is corrupt or truncated: {}", path, msg));

  // IDX is big-endian; swap multi-byte values to the host order.
  if (dtype_size(dt) > 1 && std::endian::native == std::endian::little)
    for (std::uint64_t i = 0; i < want; i += dtype_size(dt)) {
      unsigned char* v = data.data() + i;
      for (std::size_t a = 0, z = dtype_size(dt) - 1; a < z; ++a, --z) std::swap(v[a], v[z]);
    }
  static unsigned char none = 0;  // an empty tensor still needs a valid pointer
  return from_blob(want > 0 ? data.data() : &none, shape, dt);
}

}  // namespace rumus::data
