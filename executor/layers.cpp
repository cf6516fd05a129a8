#include "executor/layers.h"

#include <functional>
#include <stdexcept>
#include <mutex>

#include <torch/script.h>

namespace gpipe::executor {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

struct EmbeddingImpl : nn::Module {
  EmbeddingImpl(int64_t vocab, int64_t dim, int64_t max_seq)
      : tokens(register_module("tokens", nn::Embedding(vocab, dim))),
        positions(register_module("positions", nn::Embedding(max_seq, dim))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor pos = torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    return tokens(x) + positions(pos);
  }
  nn::Embedding tokens;
  nn::Embedding positions;
};

// Pre-norm block: x + proj(attention(ln1(x))), then x + fc2(gelu(fc1(ln2(x)))).
struct TransformerBlockImpl : nn::Module {
  TransformerBlockImpl(int64_t dim, int64_t num_heads, int64_t mlp_ratio, double dropout_p, bool is_causal)
      : heads(num_heads), dropout(dropout_p), causal(is_causal),
        ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({dim})))),
        qkv(register_module("qkv", nn::Linear(dim, 3 * dim))),
        proj(register_module("proj", nn::Linear(dim, dim))),
        ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({dim})))),
        fc1(register_module("fc1", nn::Linear(dim, mlp_ratio * dim))),
        fc2(register_module("fc2", nn::Linear(mlp_ratio * dim, dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), s = x.size(1), d = x.size(2);
    torch::Tensor qkv_out = qkv(ln1(x)).view({b, s, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    const double p = is_training() ? dropout : 0.0;
    torch::Tensor attn = at::scaled_dot_product_attention(qkv_out[0], qkv_out[1], qkv_out[2], {}, p, causal);
    attn = attn.transpose(1, 2).reshape({b, s, d});
    torch::Tensor h = x + F::dropout(proj(attn), F::DropoutFuncOptions().p(dropout).training(is_training()));
    torch::Tensor m = fc2(torch::gelu(fc1(ln2(h))));
    return h + F::dropout(m, F::DropoutFuncOptions().p(dropout).training(is_training()));
  }

  int64_t heads;
  double dropout;
  bool causal;
  nn::LayerNorm ln1;
  nn::Linear qkv, proj;
  nn::LayerNorm ln2;
  nn::Linear fc1, fc2;
};

struct LmHeadImpl : nn::Module {
  LmHeadImpl(int64_t dim, int64_t vocab)
      : norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({dim})))),
        out(register_module("out", nn::Linear(nn::LinearOptions(dim, vocab).bias(false)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return out(norm(x)); }
  nn::LayerNorm norm;
  nn::Linear out;
};

struct ConvBlockImpl : nn::Module {
  explicit ConvBlockImpl(const LayerSpec& s)
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(s.in, s.out, s.kernel).stride(s.stride).padding(s.padding)))),
        norm(register_module("norm", nn::BatchNorm2d(s.out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(norm(conv(x))); }
  nn::Conv2d conv;
  nn::BatchNorm2d norm;
};

// A layer backed by a torch::nn::Module (or by a pure function, with an empty module).
class NativeLayer final : public Layer {
 public:
  NativeLayer(std::string name, std::shared_ptr<nn::Module> module,
              std::function<torch::Tensor(const torch::Tensor&)> forward)
      : name_(std::move(name)), module_(std::move(module)), forward_(std::move(forward)) {}

  torch::Tensor Forward(const torch::Tensor& x) override { return forward_(x); }
  std::vector<torch::Tensor> Parameters() override { return module_->parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> State() override {
    std::vector<std::pair<std::string, torch::Tensor>> state;
    for (const auto& p : module_->named_parameters()) state.emplace_back(p.key(), p.value());
    for (const auto& b : module_->named_buffers()) state.emplace_back(b.key(), b.value());
    return state;
  }
  void SetTraining(bool training) override { module_->train(training); }
  void To(const torch::Device& device) override { module_->to(device); }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  std::shared_ptr<nn::Module> module_;
  std::function<torch::Tensor(const torch::Tensor&)> forward_;
};

template <typename Holder>
std::unique_ptr<Layer> Wrap(const std::string& name, Holder holder) {
  auto module = holder.ptr();
  return std::make_unique<NativeLayer>(name, module, [module](const torch::Tensor& x) { return module->forward(x); });
}

std::unique_ptr<Layer> Function(const std::string& name, std::function<torch::Tensor(const torch::Tensor&)> f) {
  return std::make_unique<NativeLayer>(name, std::make_shared<nn::Module>(), std::move(f));
}

TORCH_MODULE(Embedding);
TORCH_MODULE(TransformerBlock);
TORCH_MODULE(LmHead);
TORCH_MODULE(ConvBlock);

std::unique_ptr<Layer> BuildNative(const LayerSpec& s) {
  switch (s.type) {
    case LayerType::kEmbedding: return Wrap(s.name, Embedding(s.vocab, s.dim, s.max_seq));
    case LayerType::kLinear: return Wrap(s.name, nn::Linear(nn::LinearOptions(s.in, s.out).bias(s.bias)));
    case LayerType::kActivation:
      if (s.function == "gelu") return Function(s.name, [](const torch::Tensor& x) { return torch::gelu(x); });
      if (s.function == "tanh") return Function(s.name, [](const torch::Tensor& x) { return torch::tanh(x); });
      return Function(s.name, [](const torch::Tensor& x) { return torch::relu(x); });
    case LayerType::kLayerNorm: return Wrap(s.name, nn::LayerNorm(nn::LayerNormOptions({s.dim})));
    case LayerType::kDropout: return Wrap(s.name, nn::Dropout(s.dropout));
    case LayerType::kTransformerBlock:
      return Wrap(s.name, TransformerBlock(s.dim, s.heads, s.mlp_ratio, s.dropout, s.causal));
    case LayerType::kLmHead: return Wrap(s.name, LmHead(s.dim, s.vocab));
    case LayerType::kConv2d:
      return Wrap(s.name, nn::Conv2d(nn::Conv2dOptions(s.in, s.out, s.kernel).stride(s.stride).padding(s.padding)));
    case LayerType::kConvBlock: return Wrap(s.name, ConvBlock(s));
    case LayerType::kBatchNorm2d: return Wrap(s.name, nn::BatchNorm2d(s.channels));
    case LayerType::kMaxPool2d: return Wrap(s.name, nn::MaxPool2d(nn::MaxPool2dOptions(s.kernel).stride(s.stride)));
    case LayerType::kAvgPool2d: return Wrap(s.name, nn::AvgPool2d(nn::AvgPool2dOptions(s.kernel).stride(s.stride)));
    case LayerType::kGlobalAvgPool:
      return Function(s.name, [](const torch::Tensor& x) { return x.mean({2, 3}); });
    case LayerType::kFlatten: return Function(s.name, [](const torch::Tensor& x) { return x.flatten(1); });
  }
  return nullptr;
}

// A child of a scripted nn.Sequential.
class ScriptLayer final : public Layer {
 public:
  ScriptLayer(std::string name, torch::jit::Module module) : name_(std::move(name)), module_(std::move(module)) {}
  torch::Tensor Forward(const torch::Tensor& x) override {
    c10::IValue out;
    try {
      out = module_.forward({x});
    } catch (const c10::Error& e) {
      throw std::runtime_error("layer " + name_ + ": " + e.what_without_backtrace());
    }
    if (!out.isTensor()) {
      throw std::runtime_error("layer " + name_ + " returned " + std::string(out.tagKind()) +
                               ", not a tensor: each child of the Sequential takes one tensor and returns one");
    }
    return out.toTensor();
  }
  bool MayWriteInput() const override { return true; }
  std::vector<torch::Tensor> Parameters() override {
    std::vector<torch::Tensor> params;
    for (const torch::Tensor& p : module_.parameters()) params.push_back(p);
    return params;
  }
  std::vector<std::pair<std::string, torch::Tensor>> State() override {
    std::vector<std::pair<std::string, torch::Tensor>> state;
    for (const auto& p : module_.named_parameters()) state.emplace_back(p.name, p.value);
    for (const auto& b : module_.named_buffers()) state.emplace_back(b.name, b.value);
    return state;
  }
  void SetTraining(bool training) override { module_.train(training); }
  void To(const torch::Device& device) override { module_.to(device); }
  const std::string& name() const override { return name_; }

 private:
  std::string name_;
  torch::jit::Module module_;
};

Expected<std::vector<torch::jit::NameModule>> ScriptChildren(const ModelSpec& model) {
  try {
    torch::jit::Module root = torch::jit::load(model.torchscript_path);
    std::vector<torch::jit::NameModule> children;
    for (const auto& child : root.named_children()) children.push_back(child);
    if (children.empty()) {
      return Status::Invalid(model.torchscript_path + ": the scripted module has no children; save an "
                             "nn.Sequential whose children are the layers");
    }
    return children;
  } catch (const c10::Error& e) {
    return Status::Invalid(model.torchscript_path + ": cannot load it as TorchScript: " + e.what_without_backtrace());
  }
}

}  // namespace

std::mutex& GlobalRngMutex() {
  static std::mutex mutex;
  return mutex;
}

Expected<int> CountLayers(const ModelSpec& model) {
  if (model.torchscript_path.empty()) return model.num_layers();
  Expected<std::vector<torch::jit::NameModule>> children = ScriptChildren(model);
  if (!children.ok()) return children.status();
  return static_cast<int>(children->size());
}

std::vector<torch::Tensor> ParametersOf(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<torch::Tensor> params;
  for (const auto& layer : layers) {
    for (const torch::Tensor& p : layer->Parameters()) params.push_back(p);
  }
  return params;
}

Expected<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model, int first, int end,
                                                          const torch::Device& device) {
  std::vector<std::unique_ptr<Layer>> layers;
  if (!model.torchscript_path.empty()) {
    Expected<std::vector<torch::jit::NameModule>> children = ScriptChildren(model);
    if (!children.ok()) return children.status();
    if (end > static_cast<int>(children->size())) {
      return Status::Invalid(model.torchscript_path + ": has " + std::to_string(children->size()) +
                             " layers, but layers up to " + std::to_string(end) + " were asked for");
    }
    for (int i = first; i < end; ++i) {
      layers.push_back(std::make_unique<ScriptLayer>((*children)[i].name, (*children)[i].value));
    }
  } else {
    std::lock_guard<std::mutex> lock(GlobalRngMutex());
    torch::NoGradGuard no_grad;
    for (int i = first; i < end; ++i) {
      torch::manual_seed(model.seed + static_cast<uint64_t>(i));
      layers.push_back(BuildNative(model.layers[i]));
    }
  }
  for (auto& layer : layers) {
    layer->To(device);
    layer->SetTraining(true);
  }
  return layers;
}

torch::Tensor LossOf(const ModelSpec& /*model*/, const torch::Tensor& output, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}));
}

}  // namespace gpipe::executor
