#include "rumus/data/idx.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "rumus/ops/creation.hpp"

namespace rumus::data {

namespace {
std::vector<unsigned char> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IoError(fmt::format("read_idx: cannot open '{}': {}", path, std::strerror(errno)));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);
  gzbuffer(f, 1 << 17);
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  for (;;) {
    int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      throw IoError(fmt::format("read_idx: '{}' is corrupt: {}", path, gzerror(f, &code)));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  int code = 0;
  const char* msg = gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw IoError(fmt::format("read_idx: '{}' is corrupt or truncated: {}", path, msg));
  return bytes;
}

std::uint32_t be32(const unsigned char* p) {
  return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
}
}  // namespace

Tensor read_idx(const std::string& path) {
  std::vector<unsigned char> b = read_all(path);
  if (b.size() < 4) throw IoError(fmt::format("read_idx: '{}' is truncated: {} bytes, no IDX header", path, b.size()));
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
  if (b.size() < header)
    throw IoError(fmt::format("read_idx: '{}' is truncated inside its header ({} of {} bytes)", path, b.size(), header));
  Shape shape;
  std::uint64_t count = 1;
  for (std::size_t d = 0; d < ndim; ++d) {
    shape.push_back(be32(&b[4 + 4 * d]));
    count *= std::uint64_t(shape.back());
    if (count > (std::uint64_t(1) << 40)) throw IoError(fmt::format("read_idx: '{}' declares an absurd size {}", path, shape_str(shape)));
  }
  const std::uint64_t want = count * dtype_size(dt), have = b.size() - header;
  if (have < want)
    throw IoError(fmt::format("read_idx: '{}' is truncated: shape {} needs {} data bytes, found {}", path,
                              shape_str(shape), want, have));
  if (have > want)
    throw IoError(fmt::format("read_idx: '{}' has {} bytes after the {} data bytes of shape {}", path, have - want,
                              want, shape_str(shape)));
  unsigned char* data = b.data() + header;
  // IDX is big-endian; swap multi-byte values to the host order.
  if (dtype_size(dt) > 1 && std::endian::native == std::endian::little)
    for (std::uint64_t i = 0; i < count; ++i) {
      unsigned char* v = data + i * dtype_size(dt);
      for (std::size_t a = 0, z = dtype_size(dt) - 1; a < z; ++a, --z) std::swap(v[a], v[z]);
    }
  return from_blob(data, shape, dt);
}

}  // namespace rumus::data
