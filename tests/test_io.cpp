// safetensors (round trips, a Python-written fixture, corrupt files, atomic
// writes) and checkpoints (resume continues exactly as uninterrupted).
#include <gtest/gtest.h>

#include <rumus/rumus.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

using namespace rumus;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("rumus_io_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A file with header `json` (padded) and `data` bytes.
std::string with_header(std::string json, const std::string& data) {
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

std::string error_of(const fs::path& p) {
  try {
    io::load_safetensors(p);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtype) {
  fs::path dir = scratch("roundtrip");
  StateDict sd;
  sd["a.f32"] = tensor({{1.5, -2.0, 3.25}, {0.0, 7.0, -8.5}});
  sd["b.f64"] = tensor({1.0 / 3.0, 1e300}, {.dtype = DType::f64});
  sd["c.f16"] = tensor({0.5, -65504.0}).to(DType::f16);
  sd["d.bf16"] = tensor({1.0, -3.140625}).to(DType::bf16);
  sd["e.i32"] = tensor(std::vector<std::int32_t>{-5, 2147483647});
  sd["f.i64"] = tensor(std::vector<std::int64_t>{-9007199254740993, 7}, Shape{2, 1});
  sd["g.u8"] = tensor(std::vector<std::uint8_t>{0, 255, 17});
  sd["h.scalar"] = scalar_tensor(4.0);
  sd["i.empty"] = zeros({0, 3});
  sd["j.view"] = tensor({{1.0, 2.0}, {3.0, 4.0}}).t();  // non-contiguous
  io::save_safetensors(sd, dir / "m.safetensors", {{"note", "quote \" and \\ ok"}});
  std::string bytes = slurp(dir / "m.safetensors");
  std::uint64_t header;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(header % 8, 0u);
  io::Metadata meta;
  StateDict back = io::load_safetensors(dir / "m.safetensors", &meta);
  ASSERT_EQ(back.size(), sd.size());
  for (auto& [n, t] : sd) EXPECT_TRUE(same(t, back.at(n))) << n;
  EXPECT_EQ(back.at("f.i64").to_vector<std::int64_t>()[0], -9007199254740993);
  EXPECT_EQ(meta.at("note"), "quote \" and \\ ok");
}

TEST(Safetensors, ReadsAFileWrittenByPython) {
  // tests/data/fixture.safetensors comes from tests/data/make_safetensors_fixture.py.
  fs::path fixture = fs::path(__FILE__).parent_path() / "data" / "fixture.safetensors";
  io::Metadata meta;
  StateDict sd = io::load_safetensors(fixture, &meta);
  EXPECT_EQ(meta.at("producer"), "make_safetensors_fixture.py");
  EXPECT_EQ(sd.size(), 8u);
  EXPECT_EQ(sd.at("f32").shape(), (Shape{2, 3}));
  EXPECT_EQ(sd.at("f32").to_vector<float>(), (std::vector<float>{0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 7.5f}));
  EXPECT_EQ(sd.at("f64").to_vector<double>(), (std::vector<double>{1.0 / 3.0, -2.5, 1e10}));
  EXPECT_EQ(sd.at("f16").to(DType::f32).to_vector<float>(), (std::vector<float>{0.5f, -2.0f, 65504.0f, 6.103515625e-05f}));
  EXPECT_EQ(sd.at("bf16").to(DType::f32).to_vector<float>(), (std::vector<float>{1.0f, -0.5f, 3.140625f}));
  EXPECT_EQ(sd.at("i32").to_vector<std::int32_t>(), (std::vector<std::int32_t>{-7, 2147483647}));
  EXPECT_EQ(sd.at("i64").shape(), (Shape{2, 1}));
  EXPECT_EQ(sd.at("i64").to_vector<std::int64_t>(), (std::vector<std::int64_t>{-9007199254740993, 42}));
  EXPECT_EQ(sd.at("u8").to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 1, 128, 255}));
  EXPECT_EQ(sd.at("scalar").shape(), Shape{});
  EXPECT_EQ(sd.at("scalar").item(), 2.5);
}

TEST(Safetensors, CorruptFilesAreIoErrorsNamingTheFileAndTheProblem) {
  fs::path dir = scratch("corrupt");
  const std::string data(8, '\0');
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& expect) {
    spit(dir / name, bytes);
    std::string msg = error_of(dir / name);
    EXPECT_NE(msg.find((dir / name).string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << name << ": " << msg;
  };
  check("short", "abc", "truncated");
  check("length", std::string("\xff\xff\0\0\0\0\0\0", 8) + "{}", "exceeds");
  check("json", with_header("{\"a\":{\"dtype\":\"F32\",", data), "corrupt JSON header");
  check("notobject", with_header("[1,2]", data), "not a JSON object");
  check("dtype", with_header(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", data),
        "unsupported dtype 'F8_E4M3'");
  check("range", with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data), "outside");
  check("size", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data), "expected 12");
  check("shape", with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", data), "negative");
  check("missingfield", with_header(R"({"a":{"dtype":"F32","shape":[2]}})", data), "data_offsets");
  check("metadata", with_header(R"({"__metadata__":{"k":1}})", data), "not a string");
  EXPECT_NE(error_of(dir / "absent").find("cannot open"), std::string::npos);
}

TEST(Safetensors, AFailedSaveLeavesTheExistingFileIntact) {
  fs::path dir = scratch("atomic");
  fs::path path = dir / "keep.safetensors";
  io::save_safetensors({{"w", tensor({1.0, 2.0})}}, path);
  std::string before = slurp(path);
  EXPECT_THROW(io::save_safetensors({{"w", tensor({3.0})}, {"bad", Tensor()}}, path), IoError);
  EXPECT_THROW(io::save_safetensors({{"w", tensor({3.0})}}, dir / "no_such_dir" / "x.safetensors"), IoError);
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporaries left
}

TEST(Safetensors, ConcurrentSavesToOnePathEachSucceedAndLeaveOneWholeVersion) {
  fs::path dir = scratch("concurrent");
  const std::string path = (dir / "shared.safetensors").string();
  constexpr int kThreads = 4, kRounds = 8;
  // Each thread's version has its own size and contents, so a file mixing two
  // versions' header and data would show.
  std::vector<StateDict> versions(kThreads);
  for (int t = 0; t < kThreads; ++t)
    versions[t]["w"] = full({(t + 1) * 4096}, double(t + 1));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRounds; ++r) io::save_safetensors(versions[t], path);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  StateDict loaded = io::load_safetensors(path);
  ASSERT_EQ(loaded.count("w"), 1u);
  bool matches = false;
  for (auto& v : versions) matches = matches || same(loaded["w"], v["w"]);
  EXPECT_TRUE(matches);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temporaries left
}

TEST(Safetensors, DataRegionsMustExactlyTileTheDataBytes) {
  fs::path dir = scratch("tiling");
  auto check = [&](const std::string& name, const std::string& bytes, const std::string& expect) {
    spit(dir / name, bytes);
    std::string msg = error_of(dir / name);
    EXPECT_NE(msg.find((dir / name).string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << name << ": " << msg;
  };
  const std::string two = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[A]},"b":{"dtype":"F32","shape":[1],"data_offsets":[B]}})";
  auto header = [&](const std::string& a, const std::string& b) {
    std::string h = two;
    h.replace(h.find("[A]"), 3, "[" + a + "]");
    h.replace(h.find("[B]"), 3, "[" + b + "]");
    return h;
  };
  check("gap", with_header(header("0,4", "8,12"), std::string(12, '\0')), "gap");
  check("overlap", with_header(header("0,4", "0,4"), std::string(4, '\0')), "overlap");
  check("overlap2", with_header(header("0,4", "2,6"), std::string(6, '\0')), "overlap");
  check("leading", with_header(header("4,8", "8,12"), std::string(12, '\0')), "gap");
  check("trailing", with_header(header("0,4", "4,8"), std::string(12, '\0')), "4 bytes after");
  check("trailing_empty", with_header("{}", std::string(8, '\0')), "8 bytes after");
  // Regions in any order are fine as long as they tile.
  spit(dir / "reordered", with_header(header("4,8", "0,4"), std::string(8, '\0')));
  EXPECT_EQ(io::load_safetensors(dir / "reordered").size(), 2u);
}

TEST(Safetensors, ADirectoryIsAnIoErrorNamingIt) {
  fs::path dir = scratch("dir");
  std::string msg = error_of(dir);
  EXPECT_NE(msg.find("load_safetensors: expected a file, got the directory '" + dir.string() + "'"),
            std::string::npos)
      << msg;
}

namespace {

// A small model written with raw parameters, so the test needs only core ops.
struct TinyNet : nn::Module {
  Tensor w1, b1, w2;
  TinyNet() {
    w1 = register_parameter("w1", randn({4, 8}));
    b1 = register_parameter("b1", zeros({8}));
    w2 = register_parameter("w2", mul(randn({8, 1}), 0.3));
    register_buffer("calls", zeros({}, {.dtype = DType::i64}));
  }
  Tensor forward(const Tensor& x) override { return matmul(tanh(add(matmul(x, w1), b1)), w2); }
  std::string type_name() const override { return "TinyNet"; }
};

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
};

// Trains `epochs` epochs of a 12-example regression with shuffling and input
// noise (random numbers from the default generator), starting from `resume`
// when given and saving to `save` after `stop_after` steps.
TrainRun train(int epochs, const std::string& resume, const std::string& save, std::int64_t stop_after) {
  manual_seed(1);
  TinyNet net;
  optim::AdamW opt(net.parameters(), {.lr = 0.05});
  optim::OneCycleLR sched(opt, 0.05, 3 * epochs);
  data::DataLoader loader(data::TensorDataset(randn({12, 4}), randn({12, 1})),
                          {.batch_size = 4, .shuffle = true, .seed = 5});
  io::TrainingState state;
  if (!resume.empty()) {
    state = io::load_checkpoint(resume, net, opt);
    sched.set_step(state.step);
  }
  TrainRun run;
  for (std::int64_t epoch = state.epoch; epoch < epochs; ++epoch) {
    loader.set_epoch(epoch);
    std::int64_t batch = 0;
    for (auto& [x, y] : loader) {
      if (epoch * loader.size() + batch++ < state.step) continue;  // done before the interruption
      Tensor loss = mse_loss(net(add(x, mul(randn(x.shape()), 0.1))), y);
      opt.step(backward(loss));
      sched.step();
      run.losses.push_back(loss.item());
      if (++state.step == stop_after) {
        state.epoch = batch == loader.size() ? epoch + 1 : epoch;
        io::save_checkpoint(save, net, opt, state);
        return run;
      }
    }
  }
  for (auto& p : net.parameters())
    for (float v : p.to_vector<float>()) run.params.push_back(v);
  return run;
}

}  // namespace

TEST(Checkpoint, ResumeContinuesExactlyAsUninterrupted) {
  fs::path dir = scratch("resume");
  TrainRun straight = train(3, "", "", -1);
  ASSERT_EQ(straight.losses.size(), 9u);
  for (std::int64_t cut : {3, 5}) {  // at an epoch boundary and mid-epoch
    std::string ckpt = (dir / ("ckpt" + std::to_string(cut) + ".safetensors")).string();
    TrainRun first = train(3, "", ckpt, cut);
    TrainRun second = train(3, ckpt, "", -1);
    first.losses.insert(first.losses.end(), second.losses.begin(), second.losses.end());
    EXPECT_EQ(first.losses, straight.losses) << "cut after " << cut;
    EXPECT_EQ(second.params, straight.params) << "cut after " << cut;
  }
}

TEST(Checkpoint, MismatchedModelOrOptimizerIsAnIoErrorNamingTheFile) {
  fs::path dir = scratch("mismatch");
  std::string path = (dir / "c.safetensors").string();
  TinyNet net;
  optim::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  io::save_checkpoint(path, net, sgd, {1, 10});
  std::string before = slurp(path);

  struct Wider : nn::Module {
    Wider() { register_parameter("w1", zeros({4, 9})); }
  } wider;
  optim::SGD sgd2(wider.parameters(), {.lr = 0.1});
  try {
    io::load_checkpoint(path, wider, sgd2);
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  }
  optim::Adam adam(net.parameters());
  EXPECT_THROW(io::load_checkpoint(path, net, adam), IoError);
  io::save_safetensors({{"x", zeros({1})}}, (dir / "plain.safetensors").string());
  EXPECT_THROW(io::load_checkpoint((dir / "plain.safetensors").string(), net, sgd), IoError);
  EXPECT_EQ(slurp(path), before);
  TinyNet other;
  optim::SGD sgd3(other.parameters(), {.lr = 0.5, .momentum = 0.9});
  io::TrainingState st = io::load_checkpoint(path, other, sgd3);
  EXPECT_EQ(st.epoch, 1);
  EXPECT_EQ(st.step, 10);
  EXPECT_DOUBLE_EQ(sgd3.lr(), 0.1);
  EXPECT_EQ(other.w1.to_vector<float>(), net.w1.to_vector<float>());
}

TEST(Checkpoint, AFailedLoadLeavesTheModelAndOptimizerUnchanged) {
  fs::path dir = scratch("atomic_load");
  std::string path = (dir / "sgd.safetensors").string();
  TinyNet saved;
  optim::SGD sgd(saved.parameters(), {.lr = 0.1, .momentum = 0.9});
  io::save_checkpoint(path, saved, sgd, {1, 10});

  TinyNet net;
  optim::AdamW adamw(net.parameters(), {.lr = 0.01});
  StateDict before;
  for (auto& [n, t] : net.state_dict()) before.emplace(n, t.clone());
  ASSERT_NE(net.w1.to_vector<float>(), saved.w1.to_vector<float>());
  EXPECT_THROW(io::load_checkpoint(path, net, adamw), IoError);
  for (auto& [n, t] : net.state_dict()) EXPECT_TRUE(same(t, before.at(n))) << n << " was changed by a failed load";
  EXPECT_DOUBLE_EQ(adamw.lr(), 0.01);
}

TEST(Checkpoint, SaveRemovesStaleTemporariesOfDeadProcessesOnly) {
  fs::path dir = scratch("stale");
  std::string path = (dir / "c.safetensors").string();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: no process has this pid now
  const std::string dead = std::to_string(child), live = std::to_string(::getpid());
  const fs::path stale = path + ".tmp." + dead + ".0.1a2b3c4d";
  const fs::path stale_old = path + ".tmp." + dead;  // the older name, pid only
  const fs::path mine = path + ".tmp." + live + ".999999.1a2b3c4d";
  const fs::path other = (dir / "other.safetensors").string() + ".tmp." + dead + ".0.1a2b3c4d";
  const fs::path unrelated = path + ".tmp.notes";
  for (const fs::path& p : {stale, stale_old, mine, other, unrelated}) spit(p, "partial");

  TinyNet net;
  optim::SGD sgd(net.parameters(), {.lr = 0.1});
  io::save_checkpoint(path, net, sgd, {0, 1});
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(stale_old));
  EXPECT_TRUE(fs::exists(mine)) << "a live process's temporary was removed";
  EXPECT_TRUE(fs::exists(other)) << "another path's temporary was removed";
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_TRUE(fs::exists(path));
}

// A save killed midway (kill -9) leaves its temporary; the next load of that
// checkpoint removes it, and keeps those of live processes (a save in progress).
TEST(Checkpoint, LoadRemovesStaleTemporariesOfDeadProcessesOnly) {
  fs::path dir = scratch("stale_load");
  std::string path = (dir / "c.safetensors").string();
  TinyNet net;
  optim::SGD sgd(net.parameters(), {.lr = 0.1});
  io::save_checkpoint(path, net, sgd, {0, 1});
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: no process has this pid now
  const std::string dead = std::to_string(child);
  const fs::path stale = path + ".tmp." + dead + ".3.1a2b3c4d";
  const fs::path stale_old = path + ".tmp." + dead;
  const fs::path mine = path + ".tmp." + std::to_string(::getpid()) + ".999999.1a2b3c4d";
  const fs::path parents = path + ".tmp." + std::to_string(::getppid()) + ".0.1a2b3c4d";
  const fs::path other = (dir / "other.safetensors").string() + ".tmp." + dead + ".0.1a2b3c4d";
  for (const fs::path& p : {stale, stale_old, mine, parents, other}) spit(p, "partial");

  TinyNet loaded;
  optim::SGD sgd2(loaded.parameters(), {.lr = 0.1});
  EXPECT_EQ(io::load_checkpoint(path, loaded, sgd2).step, 1);
  EXPECT_FALSE(fs::exists(stale)) << "a dead process's temporary was kept";
  EXPECT_FALSE(fs::exists(stale_old));
  EXPECT_TRUE(fs::exists(mine)) << "this process's temporary was removed";
  EXPECT_TRUE(fs::exists(parents)) << "a live process's temporary was removed";
  EXPECT_TRUE(fs::exists(other)) << "another path's temporary was removed";
}

// Designated initialisation that names only some fields compiles cleanly
// (-Wmissing-field-initializers, part of -Wextra, made an error here).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wmissing-field-initializers"
TEST(Checkpoint, TrainingStateTakesDesignatedInitializers) {
  const io::TrainingState a{.epoch = 3};
  const io::TrainingState b{.epoch = 1, .step = 7};
  EXPECT_EQ(a.epoch, 3);
  EXPECT_EQ(a.step, 0);
  EXPECT_TRUE(a.settings.empty());
  EXPECT_EQ(b.step, 7);
}
#pragma GCC diagnostic pop

TEST(Checkpoint, ADirectoryIsAnIoErrorNamingIt) {
  fs::path dir = scratch("ckpt_dir");
  TinyNet net;
  optim::SGD sgd(net.parameters(), {.lr = 0.1});
  try {
    io::load_checkpoint(dir.string(), net, sgd);
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("expected a file, got the directory '" + dir.string() + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("load_checkpoint"), std::string::npos) << msg;
  } catch (const std::exception& e) {
    FAIL() << "expected an IoError, got: " << e.what();
  }
}

namespace {

// A checkpoint at `path` of `net` after one AdamW step, with its metadata
// and tensors then edited by `edit`.
template <class Edit>
void write_edited_checkpoint(const std::string& path, TinyNet& net, Edit edit) {
  optim::AdamW opt(net.parameters(), {.lr = 0.01});
  opt.step(backward(sum(net.forward(ones({2, 4})))));
  io::save_checkpoint(path, net, opt, {1, 1});
  io::Metadata meta;
  StateDict all = io::load_safetensors(path, &meta);
  edit(meta, all);
  io::save_safetensors(all, path, meta);
}

// Loads `path` into a fresh model and AdamW, expecting an IoError whose
// message holds every fragment, and nothing changed.
void expect_rejected(const std::string& path, const std::vector<std::string>& fragments) {
  TinyNet net;
  optim::AdamW opt(net.parameters(), {.lr = 0.5});
  const std::vector<float> w1 = net.w1.to_vector<float>();
  try {
    io::load_checkpoint(path, net, opt);
    ADD_FAILURE() << "expected an IoError for " << path;
  } catch (const IoError& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg << "\n  lacks: " << f;
  }
  EXPECT_EQ(net.w1.to_vector<float>(), w1) << "a rejected checkpoint changed the model";
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
}

}  // namespace

TEST(Checkpoint, CountersMustBeWholeNumbersInRange) {
  fs::path dir = scratch("counters");
  const std::string path = (dir / "c.safetensors").string();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"epoch", "-5"}, {"step", "18446744073709551615"}, {"step", "9223372036854775808"},
      {"epoch", "+3"}, {"epoch", " 3"}, {"step", "1e3"}, {"epoch", ""}, {"generator.offset", "-1"}};
  for (const auto& entry : bad) {
    const std::string &key = entry.first, &value = entry.second;  // clang 14 cannot capture structured bindings
    TinyNet net;
    write_edited_checkpoint(path, net, [&](io::Metadata& m, StateDict&) { m[key] = value; });
    expect_rejected(path, {"load_checkpoint", path, "'" + key + "'", "whole number", "got '" + value + "'"});
  }
  TinyNet net;
  write_edited_checkpoint(path, net, [](io::Metadata& m, StateDict&) { m["step"] = "9223372036854775807"; });
  TinyNet other;
  optim::AdamW opt(other.parameters());
  EXPECT_EQ(io::load_checkpoint(path, other, opt).step, INT64_MAX);
}

TEST(Checkpoint, OptimizerStateMissingABufferOrWithABadCountIsRejected) {
  fs::path dir = scratch("opt_state");
  const std::string path = (dir / "c.safetensors").string();
  TinyNet net;
  write_edited_checkpoint(path, net, [](io::Metadata&, StateDict& all) { all.erase("optimizer.state.0.0.exp_avg_sq"); });
  expect_rejected(path, {path, "AdamW.load_state_dict", "'state.0.0.exp_avg_sq'", "'state.0.0.step' is 1", "exp_avg, exp_avg_sq"});

  write_edited_checkpoint(path, net, [](io::Metadata&, StateDict& all) {
    all["optimizer.state.0.1.momentum_buffer"] = all.at("optimizer.state.0.1.exp_avg");
  });
  expect_rejected(path, {path, "'state.0.1.momentum_buffer' is not a buffer of this AdamW", "exp_avg, exp_avg_sq"});

  write_edited_checkpoint(path, net, [](io::Metadata&, StateDict& all) {
    all["optimizer.state.0.0.step"] = full({}, -3, {.dtype = DType::i64});
  });
  expect_rejected(path, {path, "'state.0.0.step' must be >= 0, got -3"});

  // A negative group size was printed as 2^64 - n.
  write_edited_checkpoint(path, net, [](io::Metadata&, StateDict& all) {
    all["optimizer.group.0.size"] = full({}, -1, {.dtype = DType::i64});
  });
  expect_rejected(path, {path, "'group.0.size' must be >= 0, got -1"});

  write_edited_checkpoint(path, net, [](io::Metadata&, StateDict& all) {
    all["optimizer.group.0.size"] = full({}, 2.5, {.dtype = DType::f32});
  });
  expect_rejected(path, {path, "'group.0.size' must be one integer (i32 or i64), got f32"});
}

TEST(Checkpoint, OptimizerTypeMismatchNamesBoth) {
  fs::path dir = scratch("opt_type");
  const std::string path = (dir / "c.safetensors").string();
  TinyNet saved;
  optim::SGD sgd(saved.parameters(), {.lr = 0.1});
  io::save_checkpoint(path, saved, sgd, {1, 10});
  TinyNet net;
  optim::AdamW adamw(net.parameters());
  try {
    io::load_checkpoint(path, net, adamw);
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("belongs to the optimizer SGD, expected AdamW"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("a AdamW"), std::string::npos) << msg;
  }
}

TEST(Checkpoint, SettingsAreStoredAndAResumeMustKeepThem) {
  fs::path dir = scratch("settings");
  const std::string path = (dir / "c.safetensors").string();
  TinyNet net;
  optim::SGD sgd(net.parameters(), {.lr = 0.1});
  const io::RunSettings settings{{"batch_size", "64"}, {"model", "mlp"}, {"optimizer", "sgd"}};
  io::save_checkpoint(path, net, sgd, {1, 10, settings});

  TinyNet other;
  optim::SGD sgd2(other.parameters(), {.lr = 0.5});
  EXPECT_EQ(io::load_checkpoint(path, other, sgd2).settings, settings);  // without expectations: returned only
  EXPECT_EQ(io::load_checkpoint(path, other, sgd2, settings).step, 10);

  auto expect_refused = [&](io::RunSettings given, const std::vector<std::string>& fragments) {
    TinyNet fresh;
    optim::SGD opt(fresh.parameters(), {.lr = 0.5});
    const std::vector<float> w1 = fresh.w1.to_vector<float>();
    try {
      io::load_checkpoint(path, fresh, opt, given);
      ADD_FAILURE() << "expected an IoError";
    } catch (const IoError& e) {
      const std::string msg = e.what();
      for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg << "\n  lacks: " << f;
    }
    EXPECT_EQ(fresh.w1.to_vector<float>(), w1);
    EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
  };
  io::RunSettings changed = settings;
  changed["batch_size"] = "32";
  changed["optimizer"] = "adamw";
  expect_refused(changed, {path, "other settings", "batch_size: checkpoint '64', given '32'",
                           "optimizer: checkpoint 'sgd', given 'adamw'"});
  io::RunSettings extra = settings;
  extra["limit"] = "640";
  expect_refused(extra, {path, "limit: not in the checkpoint, given '640'"});
  io::RunSettings fewer = settings;
  fewer.erase("model");
  expect_refused(fewer, {path, "model: checkpoint 'mlp', not a setting of this run"});
}
