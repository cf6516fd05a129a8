#include "executor/layers.h"

#include <functional>
#include <stdexcept>
#include <mutex>

#include <nlohmann/json.hpp>

#include <torch/csrc/jit/runtime/graph_executor.h>
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

// x times the linear layer's weight (plus its bias) through at::linear on the weight itself.
// LibTorch's nn::Linear computes addmm(bias, x, weight.t()) (or a matmul with weight.t()), and
// under autocast that casts the view weight.t(), which autocast does not cache: every forward made
// a 16-bit copy of the weight of its own, kept by each micro-batch until its backward (the tiny
// GPT's blocks kept 96 KiB each in bf16 on top of their activations).
torch::Tensor LinearOf(const nn::Linear& linear, const torch::Tensor& x) {
  return torch::linear(x, linear->weight, linear->bias);
}

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
    torch::Tensor qkv_out = LinearOf(qkv, ln1(x)).view({b, s, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    const double p = is_training() ? dropout : 0.0;
    torch::Tensor attn = at::scaled_dot_product_attention(qkv_out[0], qkv_out[1], qkv_out[2], {}, p, causal);
    attn = attn.transpose(1, 2).reshape({b, s, d});
    torch::Tensor h = x + F::dropout(LinearOf(proj, attn), F::DropoutFuncOptions().p(dropout).training(is_training()));
    torch::Tensor m = LinearOf(fc2, torch::gelu(LinearOf(fc1, ln2(h))));
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
  torch::Tensor forward(const torch::Tensor& x) { return LinearOf(out, norm(x)); }
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

  Values Apply(const Values& x) override {
    if (x.size() != 1) {
      throw std::runtime_error("layer " + name_ + " takes one tensor, but " + std::to_string(x.size()) + " came");
    }
    return {forward_(x[0])};
  }
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
    case LayerType::kLinear: {
      nn::Linear linear(nn::LinearOptions(s.in, s.out).bias(s.bias));
      return std::make_unique<NativeLayer>(s.name, linear.ptr(), [linear](const torch::Tensor& x) { return LinearOf(linear, x); });
    }
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
  Values Apply(const Values& x) override {
    c10::IValue out;
    try {
      out = module_.forward(std::vector<c10::IValue>(x.begin(), x.end()));
    } catch (const c10::Error& e) {
      throw std::runtime_error("layer " + name_ + ": " + e.what_without_backtrace());
    }
    if (out.isTensor()) return {out.toTensor()};
    if (out.isTuple() || out.isList()) {
      Values values;
      const std::vector<c10::IValue> items =
          out.isTuple() ? out.toTupleRef().elements().vec() : out.toList().vec();
      for (const c10::IValue& item : items) {
        if (!item.isTensor()) break;
        values.push_back(item.toTensor());
      }
      if (values.size() == items.size() && !values.empty()) return values;
    }
    throw std::runtime_error("layer " + name_ + " returned " + std::string(out.tagKind()) +
                             ", not a tensor or a tuple of tensors: each child of the Sequential takes the tensors the "
                             "one before returns and returns a tensor or a tuple of tensors");
  }
  bool MayWriteInput() const override { return true; }
  bool ShareParameter(const std::string& name, const torch::Tensor& tensor) override {
    torch::jit::Module owner = module_;
    std::string rest = name;
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string part = rest.substr(0, dot);
      if (!owner.hasattr(part) || !owner.attr(part).isModule()) return false;
      owner = owner.attr(part).toModule();
      rest = rest.substr(dot + 1);
    }
    if (!owner.hasattr(rest) || !owner.attr(rest).isTensor()) return false;
    owner.register_parameter(rest, tensor, /*is_buffer=*/false);
    return true;
  }
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

// The root module of a TorchScript model and what its exporter noted (gpipe.json: ties).
struct ScriptModel {
  std::vector<torch::jit::NameModule> children;
  std::string notes;
};

Expected<ScriptModel> LoadScript(const ModelSpec& model) {
  // TorchScript's profiling executor re-optimizes each graph over its first calls (for each new
  // pattern of shapes and requires-grad), which spills into a run's second and third steps and into
  // the profiler's pipeline probe, inflating what they measure (a traced Llama: 2x). The legacy
  // executor specializes once per pattern, at its first call, and runs as fast after it.
  static const bool legacy_executor = [] { return !torch::jit::getProfilingMode().exchange(false); }();
  (void)legacy_executor;
  try {
    torch::jit::ExtraFilesMap extra{{"gpipe.json", ""}};
    torch::jit::Module root = torch::jit::load(model.torchscript_path, std::nullopt, extra);
    ScriptModel script;
    for (const auto& child : root.named_children()) script.children.push_back(child);
    if (script.children.empty()) {
      return Status::Invalid(model.torchscript_path + ": the scripted module has no children; save an "
                             "nn.Sequential whose children are the layers");
    }
    script.notes = extra["gpipe.json"];
    return script;
  } catch (const c10::Error& e) {
    return Status::Invalid(model.torchscript_path + ": cannot load it as TorchScript: " + e.what_without_backtrace());
  }
}

Expected<std::vector<SharedParameter>> SharedFromNotes(const std::string& notes, const std::string& where, int layers) {
  std::vector<SharedParameter> shared;
  if (notes.empty()) return shared;
  try {
    const nlohmann::json json = nlohmann::json::parse(notes);
    for (const nlohmann::json& tie : json.value("ties", nlohmann::json::array())) {
      SharedParameter p;
      p.layers = tie.at("layers").get<std::vector<int>>();
      p.names = tie.at("names").get<std::vector<std::string>>();
      p.bytes = tie.at("bytes").get<int64_t>();
      if (p.layers.size() != p.names.size() || p.layers.size() < 2) {
        return Status::Invalid(where + ": gpipe.json: a tie needs two or more layers, each with a name");
      }
      for (int l : p.layers) {
        if (l < 0 || l >= layers) return Status::Invalid(where + ": gpipe.json: a tie names layer " + std::to_string(l) + " of " + std::to_string(layers));
      }
      shared.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Invalid(where + ": gpipe.json: " + e.what());
  }
  return shared;
}

}  // namespace

std::mutex& GlobalRngMutex() {
  static std::mutex mutex;
  return mutex;
}

torch::Tensor Layer::Forward(const torch::Tensor& x) {
  Values out = Apply({x});
  if (out.size() != 1) {
    throw std::runtime_error("layer " + name() + " returned " + std::to_string(out.size()) + " tensors where one was due");
  }
  return out[0];
}

torch::Tensor Layer::ParameterNamed(const std::string& name) {
  for (const auto& [key, value] : State()) {
    if (key == name) return value;
  }
  return {};
}

Expected<int> CountLayers(const ModelSpec& model) {
  if (model.torchscript_path.empty()) return model.num_layers();
  Expected<ScriptModel> script = LoadScript(model);
  if (!script.ok()) return script.status();
  return static_cast<int>(script->children.size());
}

Expected<std::vector<SharedParameter>> SharedParametersOf(const ModelSpec& model) {
  if (model.torchscript_path.empty()) return std::vector<SharedParameter>{};
  Expected<ScriptModel> script = LoadScript(model);
  if (!script.ok()) return script.status();
  return SharedFromNotes(script->notes, model.torchscript_path, static_cast<int>(script->children.size()));
}

Expected<std::vector<std::set<std::string>>> TransientBuffersOf(const ModelSpec& model) {
  if (model.torchscript_path.empty()) return std::vector<std::set<std::string>>(static_cast<size_t>(model.num_layers()));
  Expected<ScriptModel> script = LoadScript(model);
  if (!script.ok()) return script.status();
  std::vector<std::set<std::string>> transient(script->children.size());
  if (script->notes.empty()) return transient;
  try {
    const nlohmann::json json = nlohmann::json::parse(script->notes);
    const nlohmann::json layers = json.value("layers", nlohmann::json::array());
    for (size_t i = 0; i < layers.size() && i < transient.size(); ++i) {
      for (const nlohmann::json& name : layers[i].value("transient_buffers", nlohmann::json::array())) {
        transient[i].insert(name.get<std::string>());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Invalid(model.torchscript_path + ": gpipe.json: " + e.what());
  }
  return transient;
}

Status TieParameters(const std::vector<SharedParameter>& shared, const std::map<int, Layer*>& layers) {
  torch::NoGradGuard no_grad;
  for (const SharedParameter& p : shared) {
    torch::Tensor first;
    for (size_t k = 0; k < p.layers.size(); ++k) {
      auto it = layers.find(p.layers[k]);
      if (it == layers.end()) continue;
      Layer& layer = *it->second;
      if (!first.defined()) {
        first = layer.ParameterNamed(p.names[k]);
        if (first.defined()) continue;
      } else if (layer.ShareParameter(p.names[k], first)) {
        continue;
      }
      return Status::Invalid("layer " + std::to_string(p.layers[k]) + " (" + layer.name() + ") has no parameter " +
                             p.names[k] + " to share with the other layers that hold it");
    }
  }
  return Status::Ok();
}

std::vector<torch::Tensor> UniqueTensors(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> unique;
  std::set<const c10::TensorImpl*> seen;
  for (const torch::Tensor& p : params) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) unique.push_back(p);
  }
  return unique;
}

std::vector<torch::Tensor> ParametersOf(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<torch::Tensor> params;
  for (const auto& layer : layers) {
    for (const torch::Tensor& p : layer->Parameters()) params.push_back(p);
  }
  return UniqueTensors(params);
}

Expected<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model, int first, int end,
                                                          const torch::Device& device) {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<SharedParameter> shared;
  if (!model.torchscript_path.empty()) {
    Expected<ScriptModel> script = LoadScript(model);
    if (!script.ok()) return script.status();
    const std::vector<torch::jit::NameModule>& children = script->children;
    if (end > static_cast<int>(children.size())) {
      return Status::Invalid(model.torchscript_path + ": has " + std::to_string(children.size()) +
                             " layers, but layers up to " + std::to_string(end) + " were asked for");
    }
    for (int i = first; i < end; ++i) {
      layers.push_back(std::make_unique<ScriptLayer>(children[static_cast<size_t>(i)].name, children[static_cast<size_t>(i)].value));
    }
    Expected<std::vector<SharedParameter>> found =
        SharedFromNotes(script->notes, model.torchscript_path, static_cast<int>(children.size()));
    if (!found.ok()) return found.status();
    shared = std::move(*found);
  } else {
    std::lock_guard<std::mutex> lock(GlobalRngMutex());
    torch::NoGradGuard no_grad;
    for (int i = first; i < end; ++i) {
      torch::manual_seed(model.seed + static_cast<uint64_t>(i));
      layers.push_back(BuildNative(model.layers[i]));
    }
  }
  std::map<int, Layer*> by_index;
  for (size_t k = 0; k < layers.size(); ++k) {
    layers[k]->To(device);
    layers[k]->SetTraining(true);
    by_index[first + static_cast<int>(k)] = layers[k].get();
  }
  // After the move: each holder of a tied parameter then holds the one tensor on the device.
  GPIPE_RETURN_IF_ERROR(TieParameters(shared, by_index).WithContext(model.torchscript_path));
  return layers;
}

torch::Tensor LossOf(const ModelSpec& /*model*/, const torch::Tensor& output, const torch::Tensor& target) {
  // In fp32 whatever the logits' type: a 16-bit plan's loss as mixed precision takes it.
  const torch::Tensor logits = output.scalar_type() == torch::kFloat ? output : output.to(torch::kFloat);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

}  // namespace gpipe::executor
