// A LibTorch data-parallel training run that takes its process group from the environment alone
// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK: what `srun --ddp-env` exports).
// It trains a small regression model with gradient all-reduce, then checks that every rank ends
// with the same parameters. Gloo on CPU; NCCL on GPUs when LibTorch was built with it.
//
//   srun -N2 -n4 --ddp-env ddp_train [--steps N] [--data FILE]
//
// --data FILE reads rows of 11 floats (10 features, 1 target); without it, data is synthetic.
#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

std::string env(const char* name)
{
  const char* v = std::getenv(name);
  if (!v || !*v) {
    throw std::runtime_error(std::string(name) + " is not set (run under `srun --ddp-env`)");
  }
  return v;
}

int env_int(const char* name) { return std::stoi(env(name)); }

// Each rank gets its own slice of the data set: rows rank, rank+world, ...
std::pair<torch::Tensor, torch::Tensor> load_data(const std::string& path, int rank, int world)
{
  if (path.empty()) {
    torch::manual_seed(1000 + rank);
    auto x = torch::randn({256, 10});
    auto true_w = torch::arange(1, 11, torch::kFloat).reshape({10, 1}) / 10.0;
    return {x, x.mm(true_w) + 0.5 + 0.01 * torch::randn({256, 1})};
  }
  std::ifstream f(path);
  if (!f) {
    throw std::runtime_error("cannot read " + path);
  }
  std::vector<float> values;
  std::string line;
  int row = 0;
  while (std::getline(f, line)) {
    if (row++ % world != rank) {
      continue;
    }
    std::istringstream ss(line);
    float v;
    int n = 0;
    while (ss >> v) {
      values.push_back(v);
      ++n;
    }
    if (n != 11) {
      throw std::runtime_error(path + ": each row needs 11 numbers");
    }
  }
  if (values.empty()) {
    throw std::runtime_error(path + ": no rows for rank " + std::to_string(rank));
  }
  auto all = torch::from_blob(values.data(), {static_cast<long>(values.size() / 11), 11}).clone();
  return {all.slice(1, 0, 10), all.slice(1, 10, 11)};
}

void all_reduce(c10d::ProcessGroup& pg, torch::Tensor& t, c10d::ReduceOp op = c10d::ReduceOp::SUM)
{
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  pg.allreduce(v, opts)->wait();
}

} // namespace

int main(int argc, char** argv)
{
  try {
    int steps = 100;
    std::string data;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--steps" && i + 1 < argc) {
        steps = std::stoi(argv[++i]);
      } else if (a == "--data" && i + 1 < argc) {
        data = argv[++i];
      } else {
        std::fprintf(stderr, "usage: ddp_train [--steps N] [--data FILE]\n");
        return 2;
      }
    }
    const int rank = env_int("RANK");
    const int world = env_int("WORLD_SIZE");
    const std::string addr = env("MASTER_ADDR");

    c10d::TCPStoreOptions store_opts;
    store_opts.port = static_cast<std::uint16_t>(env_int("MASTER_PORT"));
    store_opts.isServer = rank == 0;
    store_opts.numWorkers = world;
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, store_opts);

    auto pg_opts = c10d::ProcessGroupGloo::Options::create();
    pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, pg_opts);

    torch::manual_seed(rank); // deliberately different: the broadcast below must fix it
    torch::nn::Linear model(10, 1);
    for (auto& p : model->parameters()) {
      std::vector<torch::Tensor> v{p.data()};
      pg->broadcast(v)->wait();
    }
    auto [x, y] = load_data(data, rank, world);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
    float loss_value = 0;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      for (auto& p : model->parameters()) {
        auto g = p.grad();
        all_reduce(*pg, g);
        g.div_(world);
      }
      opt.step();
      loss_value = loss.item<float>();
    }

    // Identical parameters on every rank: the element-wise max and min across ranks agree.
    auto flat = torch::cat({model->weight.detach().flatten(), model->bias.detach().flatten()});
    auto hi = flat.clone();
    auto lo = flat.clone();
    all_reduce(*pg, hi, c10d::ReduceOp::MAX);
    all_reduce(*pg, lo, c10d::ReduceOp::MIN);
    const bool same = torch::equal(hi, lo);
    std::printf("rank %d/%d local_rank %s: final loss %.5f, parameters identical on all ranks: %s\n", rank, world,
                std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "?", loss_value, same ? "yes" : "NO");
    std::fflush(stdout);
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 1;
  }
}
