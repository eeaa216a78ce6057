// A physics-informed network: an MLP u(x, t) learns the 1-D heat equation
//   u_t = k u_xx on x in [0, 1], t in [0, 1], u(x, 0) = sin(pi x), u(0, t) = u(1, t) = 0,
// from the equation alone (no solution values), through its first and second
// derivatives in its inputs: autograd::grad with create_graph, then backward
// through those derivatives to the weights. The closed-form solution
// exp(-k pi^2 t) sin(pi x) measures it. Run with --help for the options.
#include <CLI/CLI.hpp>
#include <rumus/rumus.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"

using namespace rumus;

namespace {

struct Net : nn::Module {
  nn::Linear fc1{2, 32}, fc2{32, 32}, fc3{32, 1};
  Net() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  Tensor forward(const Tensor& xt) override { return fc3(tanh(fc2(tanh(fc1(xt))))); }
  std::string type_name() const override { return "Net"; }
};

constexpr double kPi = std::numbers::pi;

double exact(double x, double t, double k) { return std::exp(-k * kPi * kPi * t) * std::sin(kPi * x); }

// Points (x, t) drawn on the host: inside the domain, at t = 0, or on the
// edges x = 0 and x = 1; with the exact solution there (used only at t = 0,
// and on the grid that measures the fit).
struct Points {
  Tensor xt, u;
};
Points make_points(std::mt19937_64& rng, std::int64_t n, double k, Device dev, int where) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> xt, u;
  for (std::int64_t i = 0; i < n; ++i) {
    double x = unit(rng), t = unit(rng);
    if (where == 1) t = 0.0;
    if (where == 2) x = x < 0.5 ? 0.0 : 1.0;
    xt.insert(xt.end(), {x, t});
    u.push_back(exact(x, t, k));
  }
  return {tensor(xt, {n, 2}).to(DType::f32).to(dev), tensor(u, {n, 1}).to(DType::f32).to(dev)};
}
enum Where { inside = 0, at_start = 1, on_edges = 2 };

// The equation's residual u_t - k u_xx at `xt`, from the network's derivatives.
Tensor residual(Net& net, const Tensor& xt_in, double k) {
  Tensor xt = xt_in.detach().requires_grad_();
  Tensor u = net.forward(xt);
  Tensor du = autograd::grad({sum(u)}, {xt}, {.create_graph = true})[0];   // (n, 2): u_x, u_t
  Tensor u_x = du.select(1, 0), u_t = du.select(1, 1);
  Tensor u_xx = autograd::grad({sum(u_x)}, {xt}, {.create_graph = true})[0].select(1, 0);
  return sub(u_t, mul(u_xx, k));
}

}  // namespace

int main(int argc, char** argv) try {
  int epochs = 8, steps = 150;
  std::int64_t points = 256;
  double lr = 3e-3, k = 0.1;
  std::uint64_t seed = 0;
  std::string device = "cpu", metrics = "pinn_metrics.csv";
  CLI::App app{"Fits an MLP u(x, t) to the heat equation u_t = k u_xx through its derivatives.", "pinn"};
  app.add_option("--epochs", epochs, "passes of --steps Adam steps")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--steps", steps, "steps per epoch, each on fresh collocation points")
      ->capture_default_str()->check(example::whole_number(1));
  app.add_option("--points", points, "collocation points per step (and per boundary)")
      ->capture_default_str()->check(example::whole_number(8));
  app.add_option("--lr", lr, "Adam's learning rate")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--diffusivity", k, "k in u_t = k u_xx")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--seed", seed, "seeds the weights and the points")->capture_default_str()->check(example::whole_number(0));
  app.add_option("--device", device, "cpu or vulkan[:N]")->capture_default_str();
  app.add_option("--metrics", metrics, "per-epoch metrics CSV; an SVG chart is written beside it")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  manual_seed(seed);
  const Device dev = Device::parse(device);
  Net net;
  net.to(dev);
  optim::Adam opt(net.parameters(), {.lr = lr});
  std::mt19937_64 rng(seed);
  // The exact solution on a 21 x 21 grid, to measure the fit.
  std::vector<double> grid, grid_values;
  for (int i = 0; i <= 20; ++i)
    for (int j = 0; j <= 20; ++j) {
      grid.insert(grid.end(), {i / 20.0, j / 20.0});
      grid_values.push_back(exact(i / 20.0, j / 20.0, k));
    }
  const Tensor grid_xt = tensor(grid, {441, 2}).to(DType::f32).to(dev);
  const Tensor grid_u = tensor(grid_values, {441, 1}).to(DType::f32).to(dev);
  std::printf("pinn: heat equation, k %g, %lld parameters, Adam lr %g, %lld points a step, device %s\n", k,
              static_cast<long long>(net.num_parameters()), lr, static_cast<long long>(points), dev.str().c_str());

  std::vector<example::EpochMetrics> rows;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (int s = 0; s < steps; ++s) {
      Tensor r = residual(net, make_points(rng, points, k, dev, inside).xt, k);
      const Points start_points = make_points(rng, points, k, dev, at_start);
      Tensor initial = sub(net.forward(start_points.xt), start_points.u);
      Tensor edges = net.forward(make_points(rng, points, k, dev, on_edges).xt);
      Tensor loss = add(add(mean(square(r)), mean(square(initial))), mean(square(edges)));
      opt.step(backward(loss));
      loss_sum += loss.item();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    NoGradGuard no_grad;
    Tensor err = sub(net.forward(grid_xt), grid_u);
    const double mse = mean(square(err)).item();
    const double rel_l2 = std::sqrt(sum(square(err)).item() / sum(square(grid_u)).item());
    const double max_abs = amax(abs(err), {0, 1}).item();
    const double within = mean(lt(abs(err), 0.01).to(DType::f32)).item();  // share of grid points within 0.01
    std::printf("epoch %d: residual loss %.3e, error against the exact solution: relative L2 %.3e, max %.3e\n",
                epoch, loss_sum / steps, rel_l2, max_abs);
    rows.push_back({epoch, loss_sum / steps, mse, within, double(steps * points * 3) / seconds, seconds});
    example::write_metrics(metrics, "pinn: heat equation", rows,
                           {.split = "exact", .split_title = "exact solution", .unit = "points"});
  }
  std::printf("metrics %s\n", metrics.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pinn: %s\n", e.what());
  return 1;
}
