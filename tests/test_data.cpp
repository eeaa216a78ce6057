// IDX reading (raw and gzip, and its bad inputs), the MNIST and CIFAR-10 datasets, and the
// DataLoader's order, batching and prefetching.
#include <gtest/gtest.h>
#include <zlib.h>

#include <rumus/rumus.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

using namespace rumus;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("rumus_data_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string idx_bytes(unsigned char type, const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string b = {0, 0, char(type), char(dims.size())};
  for (auto d : dims) b += {char(d >> 24), char(d >> 16), char(d >> 8), char(d)};
  return b + data;
}

void write_raw(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

std::string pixels(int n, int rows, int cols) {
  std::string s;
  for (int i = 0; i < n * rows * cols; ++i) s += char(i % 256);
  return s;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Idx, ReadsRawAndGzipAlike) {
  fs::path dir = scratch("idx");
  std::string bytes = idx_bytes(0x08, {3, 2, 4}, pixels(3, 2, 4));
  write_raw(dir / "a-idx3-ubyte", bytes);
  write_gz(dir / "a-idx3-ubyte.gz", bytes);
  Tensor raw = data::read_idx(dir / "a-idx3-ubyte"), gz = data::read_idx(dir / "a-idx3-ubyte.gz");
  EXPECT_EQ(raw.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(raw.dtype(), DType::u8);
  EXPECT_EQ(raw.to_vector<std::uint8_t>()[23], 23);
  EXPECT_EQ(raw.to_vector<std::uint8_t>(), gz.to_vector<std::uint8_t>());
}

TEST(Idx, ReadsBigEndianInt32) {
  fs::path dir = scratch("idx_i32");
  write_raw(dir / "v", idx_bytes(0x0C, {2}, std::string{0, 0, 1, 2, char(0xff), char(0xff), char(0xff), char(0xfe)}));
  EXPECT_EQ(data::read_idx(dir / "v").to_vector<std::int32_t>(), (std::vector<std::int32_t>{258, -2}));
}

TEST(Idx, BadInputsNameTheFileAndTheProblem) {
  fs::path dir = scratch("idx_bad");
  std::string good = idx_bytes(0x08, {2, 3}, pixels(1, 2, 3));
  write_raw(dir / "truncated", good.substr(0, good.size() - 1));
  write_raw(dir / "header_cut", good.substr(0, 6));
  write_raw(dir / "magic", "\x12\x34" + good.substr(2));
  write_raw(dir / "type", idx_bytes(0x0B, {2}, "abcd"));
  write_raw(dir / "trailing", good + "xx");
  write_gz(dir / "gz_truncated.gz", good);
  {
    std::ifstream in(dir / "gz_truncated.gz", std::ios::binary);
    std::string z((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write_raw(dir / "gz_truncated.gz", z.substr(0, z.size() - 6));
  }
  auto msg = [&](const std::string& name) { return error_of([&] { data::read_idx(dir / name); }); };
  EXPECT_NE(msg("missing").find("cannot open"), std::string::npos) << msg("missing");
  EXPECT_NE(msg("missing").find((dir / "missing").string()), std::string::npos);
  EXPECT_NE(msg("truncated").find("truncated"), std::string::npos) << msg("truncated");
  EXPECT_NE(msg("header_cut").find("truncated inside its header"), std::string::npos) << msg("header_cut");
  EXPECT_NE(msg("magic").find("magic"), std::string::npos) << msg("magic");
  EXPECT_NE(msg("type").find("unsupported type"), std::string::npos) << msg("type");
  EXPECT_NE(msg("trailing").find("after the"), std::string::npos) << msg("trailing");
  EXPECT_NE(msg("gz_truncated.gz").find("gz_truncated.gz"), std::string::npos) << msg("gz_truncated.gz");
  EXPECT_THROW(data::read_idx(dir / "truncated"), IoError);
}

namespace {
fs::path mnist_dir(const std::string& name, bool gz) {
  fs::path dir = scratch(name);
  auto put = gz ? write_gz : write_raw;
  const char* ext = gz ? ".gz" : "";
  put(dir / (std::string("train-images-idx3-ubyte") + ext), idx_bytes(0x08, {5, 2, 3}, pixels(5, 2, 3)));
  put(dir / (std::string("train-labels-idx1-ubyte") + ext), idx_bytes(0x08, {5}, std::string{3, 1, 4, 1, 5}));
  put(dir / (std::string("t10k-images-idx3-ubyte") + ext), idx_bytes(0x08, {2, 2, 3}, pixels(2, 2, 3)));
  put(dir / (std::string("t10k-labels-idx1-ubyte") + ext), idx_bytes(0x08, {2}, std::string{9, 2}));
  return dir;
}
}  // namespace

TEST(Mnist, BatchesAreScaledNormalisedFloatsAndLongLabels) {
  for (bool gz : {false, true}) {
    fs::path dir = mnist_dir(gz ? "mnist_gz" : "mnist_raw", gz);
    data::Mnist train(dir, data::Split::Train, data::Normalize{0.5, 2.0});
    EXPECT_EQ(train.size(), 5);
    data::Batch b = train.get_batch({4, 0});
    EXPECT_EQ(b.x.shape(), (Shape{2, 1, 2, 3}));
    EXPECT_EQ(b.y.dtype(), DType::i64);
    EXPECT_EQ(b.y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 3}));
    EXPECT_NEAR(b.x.to_vector<float>()[1], (25.0 / 255.0 - 0.5) / 2.0, 1e-6);  // image 4, pixel 1 = 24 + 1
    data::Mnist test(dir, data::Split::Test);
    EXPECT_EQ(test.size(), 2);
    EXPECT_NEAR(test.get(1).x.to_vector<float>()[5], 11.0 / 255.0, 1e-6);
  }
}

TEST(Mnist, FitNormalize) {
  data::Normalize n = data::Normalize::fit(tensor(std::vector<std::uint8_t>{0, 255, 0, 255}));
  EXPECT_NEAR(n.mean, 0.5, 1e-12);
  EXPECT_NEAR(n.std, 0.5, 1e-12);
}

TEST(Mnist, MissingOrMismatchedFilesAreIoErrors) {
  fs::path dir = scratch("mnist_missing");
  std::string msg = error_of([&] { data::Mnist(dir, data::Split::Train); });
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
  fs::path bad = mnist_dir("mnist_mismatch", false);
  write_raw(bad / "train-labels-idx1-ubyte", idx_bytes(0x08, {4}, std::string{1, 2, 3, 4}));
  msg = error_of([&] { data::Mnist(bad, data::Split::Train); });
  EXPECT_NE(msg.find("5 images"), std::string::npos) << msg;
}

namespace {
// CIFAR-10 binary records: image i has label i % 10 and byte k = (i + k) % 256.
std::string cifar_records(int first, int n) {
  std::string s;
  for (int i = first; i < first + n; ++i) {
    s += char(i % 10);
    for (int k = 0; k < 3 * 32 * 32; ++k) s += char((i + k) % 256);
  }
  return s;
}
}  // namespace

TEST(Cifar10, ReadsEveryTrainingFileInOrderAndTheTestFile) {
  fs::path dir = scratch("cifar");
  EXPECT_FALSE(data::Cifar10::found_in(dir.string()));
  write_raw(dir / "data_batch_1.bin", cifar_records(0, 3));
  write_raw(dir / "data_batch_2.bin", cifar_records(3, 2));
  write_raw(dir / "test_batch.bin", cifar_records(100, 2));
  EXPECT_TRUE(data::Cifar10::found_in(dir.string()));
  data::Cifar10 train(dir.string(), data::Split::Train, data::Normalize{0.5, 2.0});
  EXPECT_EQ(train.size(), 5);
  EXPECT_EQ(train.images().shape(), (Shape{5, 3, 32, 32}));
  data::Batch b = train.get_batch({4, 0});
  EXPECT_EQ(b.x.shape(), (Shape{2, 3, 32, 32}));
  EXPECT_EQ(b.y.dtype(), DType::i64);
  EXPECT_EQ(b.y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{4, 0}));  // image 4 comes from the second file
  const auto x = b.x.to_vector<float>();
  // Image 4, green plane (channel 1), row 2, column 5: byte 1024 + 2 * 32 + 5.
  const int k = 1024 + 2 * 32 + 5;
  EXPECT_NEAR(x[std::size_t(k)], (double((4 + k) % 256) / 255.0 - 0.5) / 2.0, 1e-6);
  data::Cifar10 test(dir.string(), data::Split::Test);
  EXPECT_EQ(test.size(), 2);
  EXPECT_EQ(test.get(1).y.item<std::int64_t>(), 1);  // image 101
  EXPECT_NEAR(test.get(1).x.to_vector<float>()[7], double((101 + 7) % 256) / 255.0, 1e-6);
}

TEST(Cifar10, BadFilesAreIoErrorsNamingTheFile) {
  fs::path dir = scratch("cifar_bad");
  std::string msg = error_of([&] { data::Cifar10(dir.string(), data::Split::Train); });
  EXPECT_NE(msg.find("data_batch_1.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.string()), std::string::npos) << msg;
  msg = error_of([&] { data::Cifar10(dir.string(), data::Split::Test); });
  EXPECT_NE(msg.find("test_batch.bin"), std::string::npos) << msg;
  write_raw(dir / "data_batch_1.bin", cifar_records(0, 2) + "xyz");  // a torn last record
  msg = error_of([&] { data::Cifar10(dir.string(), data::Split::Train); });
  EXPECT_NE(msg.find("6149 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3073-byte records"), std::string::npos) << msg;
  std::string bad_label = cifar_records(0, 2);
  bad_label[3073] = char(12);
  write_raw(dir / "data_batch_1.bin", bad_label);
  msg = error_of([&] { data::Cifar10(dir.string(), data::Split::Train); });
  EXPECT_NE(msg.find("record 1 has label 12"), std::string::npos) << msg;
  write_raw(dir / "data_batch_1.bin", cifar_records(0, 2));
  data::Cifar10 ok(dir.string(), data::Split::Train);
  msg = error_of([&] { ok.get_batch({2}); });
  EXPECT_NE(msg.find("index 2 out of range for 2 examples"), std::string::npos) << msg;
}

namespace {
data::TensorDataset numbered(std::int64_t n) {
  return data::TensorDataset(arange(double(n)).reshape({n, 1}), arange(double(n), {.dtype = DType::i64}));
}
std::vector<std::int64_t> seen(data::DataLoader& loader) {
  std::vector<std::int64_t> out;
  for (auto& [x, y] : loader) {
    auto v = y.to_vector<std::int64_t>();
    EXPECT_EQ(x.reshape({x.size(0)}).to_vector<float>(), std::vector<float>(v.begin(), v.end()));
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}
}  // namespace

TEST(DataLoader, SequentialWithoutShuffle) {
  data::DataLoader loader(numbered(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  std::vector<std::int64_t> want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen(loader), want);
  std::vector<std::int64_t> sizes;
  for (auto& b : loader) sizes.push_back(b.x.size(0));
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 4, 2}));
}

TEST(DataLoader, DropLast) {
  data::DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(seen(loader).size(), 8u);
}

TEST(DataLoader, ShuffleIsASeededPermutationPerEpoch) {
  data::DataLoader a(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 7});
  data::DataLoader b(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 7});
  data::DataLoader c(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 8});
  auto a0 = seen(a), a1 = seen(a), b0 = seen(b), c0 = seen(c);
  EXPECT_EQ(a0, b0);
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, c0);
  EXPECT_EQ(std::set<std::int64_t>(a0.begin(), a0.end()).size(), 50u);
  // An epoch's order depends only on (seed, epoch): resuming at epoch 1 replays it.
  b.set_epoch(1);
  EXPECT_EQ(seen(b), a1);
  EXPECT_EQ(a1, b.order(1));
}

TEST(DataLoader, WorkersGiveTheSameBatchesAsTheCallingThread) {
  data::DataLoader inline_loader(numbered(37), {.batch_size = 5, .shuffle = true, .seed = 3, .num_workers = 0});
  data::DataLoader threaded(numbered(37), {.batch_size = 5, .shuffle = true, .seed = 3, .num_workers = 3, .prefetch = 1});
  EXPECT_EQ(seen(inline_loader), seen(threaded));
}

TEST(DataLoader, BreakingEarlyStopsTheWorkers) {
  data::DataLoader loader(numbered(100), {.batch_size = 2, .num_workers = 2});
  int n = 0;
  for (auto& b : loader) {
    (void)b;
    if (++n == 3) break;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(seen(loader).size(), 100u);
}

namespace {
struct Failing : data::Dataset {
  std::int64_t size() const override { return 6; }
  data::Batch get_batch(const std::vector<std::int64_t>& idx) const override {
    if (idx.front() >= 4) throw IoError("Failing: example 4 is unreadable");
    return {zeros({std::int64_t(idx.size())}), zeros({std::int64_t(idx.size())})};
  }
};
}  // namespace

TEST(DataLoader, WorkerErrorsReachTheConsumer) {
  data::DataLoader loader(Failing{}, {.batch_size = 2, .num_workers = 2});
  int n = 0;
  EXPECT_THROW(
      for (auto& b : loader) {
        (void)b;
        ++n;
      },
      IoError);
  EXPECT_EQ(n, 2);
}

TEST(DataLoader, BadOptionsAndShapes) {
  EXPECT_THROW(data::DataLoader(numbered(3), {.batch_size = 0}), Error);
  EXPECT_THROW(data::TensorDataset(zeros({3, 2}), zeros({4})), ShapeError);
}

TEST(Idx, AGzipBombIsRejectedFromItsHeader) {
  fs::path dir = scratch("idx_bomb");
  // 4096 x 4096 x 4096 u8 = 64 GiB claimed, over 1 MiB of zeros (about 1 KiB compressed).
  write_gz(dir / "bomb.gz", idx_bytes(0x08, {4096, 4096, 4096}, std::string(1 << 20, '\0')));
  ASSERT_LT(fs::file_size(dir / "bomb.gz"), 1u << 14);
  std::string msg = error_of([&] { data::read_idx(dir / "bomb.gz"); });
  EXPECT_NE(msg.find((dir / "bomb.gz").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("68719476736 data bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
  // Under the limit but far more than the file holds: truncated, reported with both sizes.
  write_gz(dir / "short.gz", idx_bytes(0x08, {1024, 1024, 256}, std::string(1 << 20, '\0')));
  msg = error_of([&] { data::read_idx(dir / "short.gz"); });
  EXPECT_NE(msg.find("needs 268435456 data bytes, found 1048576"), std::string::npos) << msg;
}

TEST(Idx, AnOverflowingShapeIsRejected) {
  fs::path dir = scratch("idx_overflow");
  write_raw(dir / "overflow", idx_bytes(0x08, {1u << 20, 1u << 20, 1u << 24}, ""));
  std::string msg = error_of([&] { data::read_idx(dir / "overflow"); });
  EXPECT_NE(msg.find((dir / "overflow").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
  write_gz(dir / "overflow_f64.gz", idx_bytes(0x0E, {1u << 20, 1u << 20, 1u << 21}, ""));
  msg = error_of([&] { data::read_idx(dir / "overflow_f64.gz"); });
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
}

TEST(Idx, ADirectoryIsAnIoErrorNamingIt) {
  fs::path dir = scratch("idx_dir");
  std::string msg = error_of([&] { data::read_idx(dir); });
  EXPECT_NE(msg.find("read_idx: expected a file, got the directory '" + dir.string() + "'"), std::string::npos)
      << msg;
  EXPECT_THROW(data::read_idx(dir), IoError);
}
