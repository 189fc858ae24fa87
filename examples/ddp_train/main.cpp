// A LibTorch data-parallel training run that takes its process group from the environment alone
// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK: what `srun --ddp-env` exports).
// It trains a small regression model with gradient all-reduce, then checks that every rank ends
// with the same parameters. Backend: NCCL when this build has it (DDP_TRAIN_WITH_NCCL) and a CUDA
// device is visible, else Gloo on the CPU (DDP_TRAIN_WITH_GLOO); --backend forces one.
//
//   srun -N2 -n4 --ddp-env ddp_train [--steps N] [--data FILE] [--backend nccl|gloo]
//
// --data FILE reads rows of 11 floats (10 features, 1 target); without it, data is synthetic.
#include <torch/torch.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#ifdef DDP_TRAIN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DDP_TRAIN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

enum class Backend { nccl, gloo };

#ifdef DDP_TRAIN_WITH_NCCL
constexpr bool k_have_nccl = true;
#else
constexpr bool k_have_nccl = false;
#endif
#ifdef DDP_TRAIN_WITH_GLOO
constexpr bool k_have_gloo = true;
#else
constexpr bool k_have_gloo = false;
#endif

struct Args
{
  int steps = 100;
  std::string data;
  std::optional<Backend> backend; // forced by --backend
};

struct UsageError : std::runtime_error
{
  using std::runtime_error::runtime_error;
};

std::string env(const char* name)
{
  const char* v = std::getenv(name);
  if (!v || !*v) {
    throw std::runtime_error(std::string(name) + " is not set (run under `srun --ddp-env`)");
  }
  return v;
}

int env_int(const char* name) { return std::stoi(env(name)); }

Args parse_args(int argc, char** argv)
{
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      args.steps = std::stoi(argv[++i]);
    } else if (a == "--data" && i + 1 < argc) {
      args.data = argv[++i];
    } else if (a == "--backend" && i + 1 < argc) {
      std::string b = argv[++i];
      if (b != "nccl" && b != "gloo") {
        throw UsageError("--backend: unknown value \"" + b + "\" (expected nccl or gloo)");
      }
      args.backend = b == "nccl" ? Backend::nccl : Backend::gloo;
    } else {
      throw UsageError("usage: ddp_train [--steps N] [--data FILE] [--backend nccl|gloo]");
    }
  }
  return args;
}

// NCCL when it is compiled in and a GPU is visible, else Gloo; a forced backend that cannot run
// here is an error rather than a silent fallback.
Backend choose_backend(std::optional<Backend> forced, bool cuda)
{
  if (forced == Backend::nccl) {
    if (!k_have_nccl) {
      throw UsageError("--backend nccl: this ddp_train was built without NCCL (its LibTorch has no CUDA or no NCCL)");
    }
    if (!cuda) {
      throw UsageError("--backend nccl: no CUDA device is visible");
    }
    return Backend::nccl;
  }
  if (forced == Backend::gloo) {
    if (!k_have_gloo) {
      throw UsageError("--backend gloo: this ddp_train was built without Gloo (its LibTorch ships no gloo headers)");
    }
    return Backend::gloo;
  }
  if (k_have_nccl && cuda) {
    return Backend::nccl;
  }
  if (k_have_gloo) {
    return Backend::gloo;
  }
  throw UsageError("no backend: no CUDA device is visible and this ddp_train was built without Gloo");
}

// One process per GPU: cuda:LOCAL_RANK, or device 0 when only one is visible (Slurm's
// --gpus-per-task=1 leaves each task exactly its own GPU in CUDA_VISIBLE_DEVICES).
torch::Device choose_device(Backend backend)
{
  if (backend == Backend::gloo) {
    return torch::Device(torch::kCPU);
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count == 1) {
    return torch::Device(torch::kCUDA, 0);
  }
  const int local = env_int("LOCAL_RANK");
  if (local < 0 || local >= count) {
    throw std::runtime_error("LOCAL_RANK " + std::to_string(local) + " has no GPU: " + std::to_string(count) +
                             " CUDA devices are visible");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local));
}

std::string nccl_version()
{
#ifdef DDP_TRAIN_WITH_NCCL
  return "NCCL " + c10d::getNcclVersion();
#else
  return "NCCL n/a";
#endif
}

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

// Gloo's and NCCL's process groups derive from c10d::ProcessGroup in LibTorch 1.13 and from
// c10d::Backend since 2.0; templates keep one source for both.
template <class Group>
void all_reduce(Group& pg, torch::Tensor& t, c10d::ReduceOp op = c10d::ReduceOp::SUM)
{
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  pg.allreduce(v, opts)->wait();
}

struct Outcome
{
  float loss = 0;
  bool same = false;
};

template <class Group>
Outcome train(Group& pg, const Args& args, int rank, int world, torch::Device device)
{
  torch::manual_seed(rank); // deliberately different: the broadcast below must fix it
  torch::nn::Linear model(10, 1);
  model->to(device);
  for (auto& p : model->parameters()) {
    std::vector<torch::Tensor> v{p.data()};
    pg.broadcast(v)->wait();
  }
  auto [x_cpu, y_cpu] = load_data(args.data, rank, world);
  auto x = x_cpu.to(device);
  auto y = y_cpu.to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
  Outcome out;
  for (int step = 0; step < args.steps; ++step) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    for (auto& p : model->parameters()) {
      auto g = p.grad();
      all_reduce(pg, g);
      g.div_(world);
    }
    opt.step();
    out.loss = loss.item<float>();
  }

  // Identical parameters on every rank: the element-wise max and min across ranks agree.
  auto flat = torch::cat({model->weight.detach().flatten(), model->bias.detach().flatten()});
  auto hi = flat.clone();
  auto lo = flat.clone();
  all_reduce(pg, hi, c10d::ReduceOp::MAX);
  all_reduce(pg, lo, c10d::ReduceOp::MIN);
  out.same = torch::equal(hi, lo);
  return out;
}

Outcome run(Backend backend, const Args& args, int rank, int world, torch::Device device,
            const c10::intrusive_ptr<c10d::Store>& store)
{
#ifdef DDP_TRAIN_WITH_NCCL
  if (backend == Backend::nccl) {
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world);
    Outcome out = train(*pg, args, rank, world, device);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
    pg->shutdown(); // flushes and destroys the communicators before the group goes away
#endif
    return out;
  }
#endif
#ifdef DDP_TRAIN_WITH_GLOO
  if (backend == Backend::gloo) {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
    return train(*pg, args, rank, world, device);
  }
#endif
  throw std::logic_error("backend not compiled in");
}

} // namespace

int main(int argc, char** argv)
{
  try {
    const Args args = parse_args(argc, argv);
    const Backend backend = choose_backend(args.backend, torch::cuda::is_available());
    const int rank = env_int("RANK");
    const int world = env_int("WORLD_SIZE");
    const std::string addr = env("MASTER_ADDR");
    const torch::Device device = choose_device(backend);
    if (rank == 0) {
      std::printf("ddp_train: backend %s, device %s, %s, LibTorch %s, world %d\n",
                  backend == Backend::nccl ? "nccl" : "gloo", device.str().c_str(), nccl_version().c_str(),
                  TORCH_VERSION, world);
      std::fflush(stdout);
    }

    c10d::TCPStoreOptions store_opts;
    store_opts.port = static_cast<std::uint16_t>(env_int("MASTER_PORT"));
    store_opts.isServer = rank == 0;
    store_opts.numWorkers = world;
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, store_opts);

    const Outcome out = run(backend, args, rank, world, device, store);
    std::printf("rank %d/%d local_rank %s device %s: final loss %.5f, parameters identical on all ranks: %s\n", rank,
                world, std::getenv("LOCAL_RANK") ? std::getenv("LOCAL_RANK") : "?", device.str().c_str(), out.loss,
                out.same ? "yes" : "NO");
    std::fflush(stdout);
    return out.same ? 0 : 1;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 1;
  }
}
