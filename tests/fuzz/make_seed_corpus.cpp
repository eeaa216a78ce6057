// Writes the seed corpus of the fuzz targets: small valid files of every kind
// each reader accepts. Its output is committed under tests/fuzz/corpus/;
// rerun it (make_seed_corpus tests/fuzz/corpus) when a format changes.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <rumus/io/checkpoint.hpp>
#include <rumus/io/safetensors.hpp>

#include "fuzz_model.hpp"

namespace fs = std::filesystem;
using namespace rumus;

namespace {
void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

void write_gz(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

// IDX: two zero bytes, the type code, the rank, each dim as a big-endian u32,
// then the data (big-endian too).
std::string idx(std::uint8_t type, const std::vector<std::uint32_t>& dims, std::size_t element_size) {
  std::string s{'\0', '\0', char(type), char(dims.size())};
  std::size_t n = 1;
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(char(d >> shift));
    n *= d;
  }
  for (std::size_t i = 0; i < n * element_size; ++i) s.push_back(char((i * 37) & 0x7f));
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seed_corpus <directory>\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* sub : {"idx", "safetensors", "checkpoint"}) fs::create_directories(root / sub);

  write(root / "idx" / "u8_images", idx(0x08, {2, 3, 3}, 1));
  write(root / "idx" / "u8_labels", idx(0x08, {5}, 1));
  write(root / "idx" / "i32_matrix", idx(0x0C, {2, 2}, 4));
  write(root / "idx" / "f32_vector", idx(0x0D, {3}, 4));
  write(root / "idx" / "f64_scalarish", idx(0x0E, {1, 1}, 8));
  write_gz(root / "idx" / "u8_images.gz", idx(0x08, {2, 3, 3}, 1));
  write_gz(root / "idx" / "f32_vector.gz", idx(0x0D, {3}, 4));

  io::save_safetensors({{"a", arange(6).reshape({2, 3})}}, (root / "safetensors" / "one_f32").string());
  io::save_safetensors({{"f64", ones({2}, {.dtype = DType::f64})},
                        {"i64", arange(3, {.dtype = DType::i64})},
                        {"u8", zeros({0}, {.dtype = DType::u8})},
                        {"scalar", scalar_tensor(1.5)}},
                       (root / "safetensors" / "dtypes_and_metadata").string(), {{"format", "pt"}, {"note", "x"}});

  rumus_fuzz::FuzzNet net;
  optim::AdamW adamw(net.parameters());
  io::save_checkpoint((root / "checkpoint" / "fresh").string(), net, adamw, {0, 0}, Generator(1));
  Tensor loss = sum(square(net.parameters()[0])) + sum(net.parameters()[1]);
  adamw.step(backward(loss));
  io::save_checkpoint((root / "checkpoint" / "after_one_step").string(), net, adamw, {1, 1}, Generator(2));
  return 0;
}
