#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "motley/exec/rank_layout.h"
#include "motley/exec/train.h"

namespace motley::testing {

ModelSpec wide_model(int64_t hidden) {
  ModelSpec model = preset("tiny-llama");
  model.layers[0].embedding->hidden = hidden;
  for (int i = 1; i <= 4; ++i) {
    Layer ffn;
    ffn.name = "wide." + std::to_string(i);
    ffn.kind = LayerKind::kFeedForward;
    ffn.ffn = FeedForwardShape{hidden, 8, Activation::kSwiGlu, false};
    ffn.num_norms = 1;
    model.layers[i] = ffn;
  }
  model.layers[5].head->hidden = hidden;
  return model;
}

ModelSpec mamba1_hybrid(bool inner_norms) {
  ModelSpec model = preset("tiny-hybrid");
  model.name = inner_norms ? "tiny-hybrid-mamba1-norms" : "tiny-hybrid-mamba1";
  for (Layer& l : model.layers) {
    if (!l.mamba) continue;
    MambaShape m;
    m.version = 1;
    m.hidden = l.mamba->hidden;
    m.d_inner = 128;
    m.d_state = 8;
    m.dt_rank = 4;
    m.conv_kernel = 4;
    m.gated_norm = false;
    m.inner_norms = inner_norms;
    l.mamba = m;
  }
  return model;
}

ModelSpec mla_model(int64_t q_lora_rank, bool bias) {
  ModelSpec model = preset("tiny-llama");
  model.name = "tiny-mla";
  for (int i = 1; i <= 4; ++i) {
    AttentionShape& a = *model.layers[i].attention;
    a.num_heads = 4;
    a.num_kv_heads = 4;
    a.mla = true;
    a.q_lora_rank = q_lora_rank;
    a.kv_lora_rank = 32;
    a.qk_nope_head_dim = 16;
    a.qk_rope_head_dim = 8;
    a.head_dim = 24;
    a.v_head_dim = 16;
    a.qkv_bias = bias;
    a.output_bias = bias;
  }
  return model;
}

ModelSpec deepseek_v2_lite_miniature() {
  const ModelSpec full = preset("deepseek-v2-lite");
  const AttentionShape attention = *mla_model(0).layers[1].attention;
  ModelSpec model = full;
  model.name = "deepseek-v2-lite-miniature";
  model.dtype = DType::kFloat32;
  model.layers = {full.layers[0], full.layers[1], full.layers[2], full.layers[3],
                  full.layers.back()};
  for (Layer& l : model.layers) {
    if (l.embedding) *l.embedding = EmbeddingShape{256, 64, 0};
    if (l.head) *l.head = HeadShape{256, 64, false};
    if (l.attention) l.attention = attention;
    if (l.ffn) {
      l.ffn->hidden = 64;
      l.ffn->ffn_size = 176;
    }
    if (l.moe) {
      l.moe->hidden = 64;
      l.moe->num_experts = 8;
      l.moe->top_k = 2;
      l.moe->expert_ffn_size = 32;
      l.moe->shared_ffn_size = 32;
    }
  }
  return model;
}

namespace {

// Delays before its base's wait.
class DelayedWait final : public TransportRequest {
 public:
  DelayedWait(std::unique_ptr<TransportRequest> base, DelayingTransport* owner)
      : base_(std::move(base)), owner_(owner) {}
  Status wait() override {
    owner_->delay();
    return base_->wait();
  }

 private:
  std::unique_ptr<TransportRequest> base_;
  DelayingTransport* owner_;
};

}  // namespace

DelayingTransport::DelayingTransport(std::unique_ptr<Transport> base, uint64_t seed)
    : base_(std::move(base)), random_(seed) {}

Result<std::unique_ptr<TransportRequest>> DelayingTransport::send(const at::Tensor& tensor,
                                                                  int peer, MessageTag tag,
                                                                  std::string what) {
  delay();
  MOTLEY_ASSIGN_OR_RETURN(auto request, base_->send(tensor, peer, tag, std::move(what)));
  return std::unique_ptr<TransportRequest>(new DelayedWait(std::move(request), this));
}

Result<std::unique_ptr<TransportRequest>> DelayingTransport::recv(const at::Tensor& buffer,
                                                                  int peer, MessageTag tag,
                                                                  std::string what) {
  MOTLEY_ASSIGN_OR_RETURN(auto request, base_->recv(buffer, peer, tag, std::move(what)));
  return std::unique_ptr<TransportRequest>(new DelayedWait(std::move(request), this));
}

Status DelayingTransport::all_reduce_sum(const std::vector<at::Tensor>& tensors,
                                         const std::vector<int>& ranks) {
  delay();
  return base_->all_reduce_sum(tensors, ranks);
}

Result<std::unique_ptr<TransportRequest>> DelayingTransport::all_reduce_sum_async(
    const std::vector<at::Tensor>& tensors, const std::vector<int>& ranks) {
  delay();
  MOTLEY_ASSIGN_OR_RETURN(auto request, base_->all_reduce_sum_async(tensors, ranks));
  return std::unique_ptr<TransportRequest>(new DelayedWait(std::move(request), this));
}

void DelayingTransport::delay() {
  std::this_thread::sleep_for(std::chrono::microseconds(random_() % 2000));
}

void RecordingTransport::record(const std::vector<at::Tensor>& tensors,
                                const std::vector<int>& ranks, bool posted) {
  Sum sum{ranks, {}, posted};
  for (const at::Tensor& t : tensors) sum.shapes.push_back(t.sizes().vec());
  sums_.push_back(std::move(sum));
}

ExecOptions exec_options() {
  ExecOptions options;
  options.seed = 11;
  options.optimizer.learning_rate = 1e-2;
  return options;
}

int world_size(const Plan& plan) { return RankLayout(plan).world_size(); }

WorldResult run_reference(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                          int steps, GradientOrder order) {
  single_threaded();
  auto trainer = SequentialTrainer::create(exec_options(), plan, model, tokens, order);
  EXPECT_TRUE(trainer.is_ok()) << trainer.status().message();
  WorldResult out;
  for (int s = 0; s < steps; ++s) {
    auto loss = (*trainer)->step();
    EXPECT_TRUE(loss.is_ok()) << loss.status().message();
    out.losses.push_back(*loss);
  }
  for (const NamedTensor& p : (*trainer)->parameters()) out.parameters[p.name] = p.tensor;
  return out;
}

std::vector<RankRun> run_ranks(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                               int steps, bool delays, const TransportOptions& transport_options) {
  single_threaded();
  const int world = world_size(plan);
  InProcessNetwork network(world, transport_options);
  std::vector<RankRun> out(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Transport> transport = network.endpoint(rank);
      if (delays) transport = std::make_unique<DelayingTransport>(std::move(transport), 31 + rank);
      auto executor = RankExecutor::create(exec_options(), plan, model, tokens, *transport);
      if (!executor.is_ok()) {
        ADD_FAILURE() << executor.status().message();
        network.shut_down("rank " + std::to_string(rank) + " failed");
        return;
      }
      for (int s = 0; s < steps; ++s) {
        auto result = (*executor)->step();
        if (!result.is_ok()) {
          ADD_FAILURE() << result.status().message();
          network.shut_down("rank " + std::to_string(rank) + " failed");
          return;
        }
        out[rank].losses.push_back(result->loss);
      }
      out[rank].parameters = (*executor)->parameters();
      out[rank].slices = (*executor)->slices();
      out[rank].optimizer_state_bytes = (*executor)->optimizer_state_bytes();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.norm().item<double>();
  return (a - b).norm().item<double>() / (scale > 0 ? scale : 1.0);
}

void single_threaded() {
  at::set_num_threads(1);
  // Looked up at run time: the BLAS behind libtorch is chosen by the system (alternatives).
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
  }
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

at::Tensor rows_of(const at::Tensor& full, const TensorSlice& slice) {
  return full.index_select(slice.dim, slice.rows);
}

}  // namespace

void expect_matches_reference(const Plan& plan, const ModelSpec& model, int steps, bool delays) {
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const std::vector<testing::RankRun> ranks =
      testing::run_ranks(plan, model, *tokens, steps, delays);
  const WorldResult reference =
      run_reference(plan, model, *tokens, steps, GradientOrder::kSequential);
  if (steps > 1) {
    EXPECT_LT(reference.losses.back(), reference.losses[0]);  // it trains
  }
  const double parameter_bound = 1e-3;
  const double gradient_bound = steps == 1 ? 1e-5 : 1e-2;
  const RankLayout layout(plan);
  const int last_stage = static_cast<int>(plan.stages.size()) - 1;
  std::map<std::string, std::map<int64_t, at::Tensor>> rows_seen;  // name -> full row -> value
  std::map<std::string, int64_t> split_dim;
  std::set<std::string> names;
  for (int rank = 0; rank < static_cast<int>(ranks.size()); ++rank) {
    const testing::RankRun& r = ranks[rank];
    const bool holds_loss = std::count(layout.stage_ranks(last_stage).begin(),
                                       layout.stage_ranks(last_stage).end(), rank) > 0;
    ASSERT_EQ(r.losses.size(), static_cast<size_t>(steps)) << "rank " << rank;
    for (int s = 0; s < steps; ++s) {
      ASSERT_EQ(r.losses[s].has_value(), holds_loss) << "rank " << rank;
      if (holds_loss) {
        EXPECT_LT(std::abs(*r.losses[s] - reference.losses[s]) / reference.losses[s], 1e-5)
            << "rank " << rank << " step " << s;
      }
    }
    for (const NamedTensor& p : r.parameters) {
      names.insert(p.name);
      const TensorSlice& slice = r.slices.at(p.name);
      split_dim[p.name] = slice.dim;
      const at::Tensor& full = reference.parameters.at(p.name);
      ASSERT_EQ(std::vector<int64_t>(full.sizes().begin(), full.sizes().end()), slice.full_shape)
          << p.name;
      EXPECT_LT(relative_difference(p.tensor, rows_of(full, slice)), parameter_bound)
          << p.name << " on rank " << rank;
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      EXPECT_LT(relative_difference(p.tensor.grad(), rows_of(full.grad(), slice)), gradient_bound)
          << p.name << " gradient on rank " << rank;
      // Rows held by several ranks (replicas, a group's replicated rows) are the same bits.
      auto rows = slice.rows.accessor<int64_t, 1>();
      for (int64_t i = 0; i < rows.size(0); ++i) {
        const at::Tensor value = p.tensor.select(slice.dim, i);
        auto [it, inserted] = rows_seen[p.name].emplace(rows[i], value);
        if (!inserted) {
          EXPECT_TRUE(at::equal(it->second, value))
              << p.name << " row " << rows[i] << " differs on rank " << rank;
        }
      }
    }
  }
  // Every parameter of the model is held somewhere, every row of it by some rank.
  EXPECT_EQ(names.size(), reference.parameters.size());
  for (const auto& [name, rows] : rows_seen) {
    EXPECT_EQ(static_cast<int64_t>(rows.size()),
              reference.parameters.at(name).size(split_dim.at(name)))
        << name;
  }
}

void expect_all_to_all_delivers(int rank, Transport& transport) {
  if (rank == 1) return;
  const std::vector<int> ranks = {0, 2};
  const int me = rank / 2;
  // Member i sends member j (i + 2 j + 1) % 4 rows: 1, 3, 2, 0 for (0,0), (0,1), (1,0), (1,1).
  auto rows = [](int i, int j) { return static_cast<int64_t>((i + 2 * j + 1) % 4); };
  auto block = [&](int i, int j) {
    return at::arange(rows(i, j) * 3, at::kFloat).view({rows(i, j), 3}) + 100.0 * i + 10.0 * j;
  };
  std::vector<at::Tensor> send, recv;
  for (int j = 0; j < 2; ++j) send.push_back(block(me, j));
  for (int i = 0; i < 2; ++i) recv.push_back(at::full({rows(i, me), 3}, -1.0f));
  const Status status = transport.all_to_all(send, recv, ranks);
  ASSERT_TRUE(status.is_ok()) << status.message();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(at::equal(recv[i], block(i, me))) << "rank " << rank << " from member " << i;
  }
}

void expect_checkpoints_resume_across(const Plan& first, const Plan& second, const ModelSpec& model,
                                      const std::string& name) {
  single_threaded();
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const std::string dir = (std::filesystem::temp_directory_path() / name).string();
  for (const auto& [a, b] : {std::pair{&first, &second}, std::pair{&second, &first}}) {
    std::filesystem::remove_all(dir);
    TrainOptions options;
    options.exec = exec_options();
    options.steps = 4;
    auto uninterrupted = train_in_process(options, *a, model, *tokens);
    ASSERT_TRUE(uninterrupted.is_ok()) << uninterrupted.status().message();
    options.steps = 2;
    options.checkpoint_dir = dir;
    auto before = train_in_process(options, *a, model, *tokens);
    ASSERT_TRUE(before.is_ok()) << before.status().message();
    options.checkpoint_dir.clear();
    options.resume_from = dir;
    auto after = train_in_process(options, *b, model, *tokens);
    ASSERT_TRUE(after.is_ok()) << after.status().message();
    ASSERT_EQ(after->losses.size(), 2u);
    for (int s = 0; s < 2; ++s) {
      EXPECT_LT(
          std::abs(after->losses[s] - uninterrupted->losses[2 + s]) / uninterrupted->losses[2 + s],
          1e-5)
          << "step " << 2 + s;
    }
  }
  std::filesystem::remove_all(dir);
}

void expect_matches_reference(const Plan& plan, const ModelSpec& model) {
  {
    SCOPED_TRACE("one step");
    expect_matches_reference(plan, model, 1);
  }
  SCOPED_TRACE(std::to_string(kSteps) + " steps");
  expect_matches_reference(plan, model, kSteps);
}

}  // namespace motley::testing
