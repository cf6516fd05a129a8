#include "executor/weights.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/safetensors.h"
#include "core/schedule/placement.h"
#include "executor/layers.h"

namespace gpipe::executor {
namespace {

constexpr std::pair<torch::ScalarType, const char*> kDtypes[] = {
    {torch::kFloat, "F32"}, {torch::kBFloat16, "BF16"}, {torch::kHalf, "F16"},  {torch::kDouble, "F64"},
    {torch::kLong, "I64"},  {torch::kInt, "I32"},       {torch::kShort, "I16"}, {torch::kChar, "I8"},
    {torch::kByte, "U8"},   {torch::kBool, "BOOL"}};

Expected<std::string> SafetensorsDtype(torch::ScalarType type) {
  for (const auto& [t, name] : kDtypes) {
    if (t == type) return std::string(name);
  }
  return Status::Invalid(std::string("no safetensors dtype for ") + c10::toString(type));
}

std::optional<torch::ScalarType> TorchDtype(const std::string& name) {
  for (const auto& [t, n] : kDtypes) {
    if (name == n) return t;
  }
  return std::nullopt;
}

// Where each tied parameter's alias reads from: (layer, name) of a later holder -> the first's.
Expected<std::map<std::pair<int, std::string>, std::pair<int, std::string>>> TiedAliases(const ModelSpec& model) {
  Expected<std::vector<SharedParameter>> shared = SharedParametersOf(model);
  if (!shared.ok()) return shared.status();
  std::map<std::pair<int, std::string>, std::pair<int, std::string>> aliases;
  for (const SharedParameter& p : *shared) {
    for (size_t k = 1; k < p.layers.size(); ++k) aliases[{p.layers[k], p.names[k]}] = {p.layers[0], p.names[0]};
  }
  return aliases;
}

// Calls `visit(layer index, state name, tensor)` for every tensor of this rank's layers.
template <typename Visit>
void ForEachTensor(const Plan& plan, std::vector<StageSetup>& stages, Visit visit) {
  for (StageSetup& stage : stages) {
    const StagePlan& sp = plan.stages[static_cast<size_t>(stage.stage)];
    for (int l = sp.first_layer; l < sp.end_layer; ++l) {
      for (auto& [name, tensor] : stage.layers[static_cast<size_t>(l - sp.first_layer)]->State()) visit(l, name, tensor);
    }
  }
}

std::string PartPath(const std::string& path, int rank) { return path + ".part-" + std::to_string(rank); }

// This rank's tensors (tied aliases left out) to a part file beside `path`.
Status WritePart(const std::string& path, const Plan& plan, const ModelSpec& model, int rank,
                 std::vector<StageSetup>& stages) {
  Expected<std::map<std::pair<int, std::string>, std::pair<int, std::string>>> aliases = TiedAliases(model);
  if (!aliases.ok()) return aliases.status();
  Expected<std::vector<std::set<std::string>>> transient = TransientBuffersOf(model);
  if (!transient.ok()) return transient.status();
  std::vector<torch::Tensor> held;  // CPU copies that the blobs point into
  std::vector<SafetensorsBlob> blobs;
  Status status;
  ForEachTensor(plan, stages, [&](int layer, const std::string& name, const torch::Tensor& tensor) {
    if (!status.ok() || aliases->count({layer, name}) > 0 || (*transient)[static_cast<size_t>(layer)].count(name) > 0) {
      return;
    }
    Expected<std::string> dtype = SafetensorsDtype(tensor.scalar_type());
    if (!dtype.ok()) {
      status = dtype.status().WithContext("layer " + std::to_string(layer) + " tensor " + name);
      return;
    }
    held.push_back(tensor.detach().to(torch::kCPU).contiguous());
    const torch::Tensor& t = held.back();
    blobs.push_back({WeightName(model, layer, name), *dtype, t.sizes().vec(), static_cast<const char*>(t.data_ptr()),
                     static_cast<int64_t>(t.nbytes())});
  });
  GPIPE_RETURN_IF_ERROR(status);
  return WriteSafetensors(PartPath(path, rank), blobs, {});
}

// Rank 0: the parts of replica 0's ranks into one file, then the parts removed.
Status MergeParts(const std::string& path, const Plan& plan, const ModelSpec& model) {
  std::vector<std::string> parts;
  std::vector<std::vector<char>> data;  // each tensor's bytes; a blob points into its buffer, which moves intact
  std::vector<SafetensorsBlob> blobs;
  std::set<std::string> seen;
  for (int r = 0; r < plan.num_ranks(); ++r) {
    parts.push_back(PartPath(path, plan.DeviceOf(0, r)));
    Expected<SafetensorsFile> part = OpenSafetensors(parts.back());
    if (!part.ok()) return part.status();
    for (const auto& [name, tensor] : part->tensors) {
      if (!seen.insert(name).second) return Status::Invalid(path + ": two ranks hold tensor \"" + name + "\"");
      Expected<std::vector<char>> bytes = part->Read(tensor);
      if (!bytes.ok()) return bytes.status();
      data.push_back(std::move(*bytes));
      blobs.push_back({name, tensor.dtype, tensor.shape, data.back().data(), static_cast<int64_t>(data.back().size())});
    }
  }
  GPIPE_RETURN_IF_ERROR(WriteSafetensors(path, blobs, {{"format", "pt"}, {"model", model.name}, {"written_by", "gpipe-plan run"}}));
  for (const std::string& p : parts) {
    std::error_code ignored;
    std::filesystem::remove(p, ignored);
  }
  return Status::Ok();
}

}  // namespace

std::string WeightName(const ModelSpec& model, int layer, const std::string& state_name) {
  const bool built_in = model.torchscript_path.empty() && model.python_path.empty();
  return (built_in ? model.layers[static_cast<size_t>(layer)].name : std::to_string(layer)) + "." + state_name;
}

Status SaveWeights(const std::string& path, const Plan& plan, const ModelSpec& model, int replica,
                   Communicator& comm, std::vector<StageSetup>& stages) {
  Status mine = replica == 0 ? WritePart(path, plan, model, comm.rank(), stages) : Status::Ok();
  // Rank 0 hears from every rank before it merges: a gather is a barrier for it.
  const std::vector<std::string> errors = comm.GatherToRankZero(mine.ok() ? "" : mine.message());
  if (!mine.ok()) return mine.WithContext("--save-weights " + path);
  for (const std::string& error : errors) {
    if (!error.empty()) return Status::Invalid("--save-weights " + path + ": another rank failed: " + error);
  }
  if (comm.rank() != 0) return Status::Ok();
  return MergeParts(path, plan, model).WithContext("--save-weights");
}

Status LoadWeights(const std::string& path, const Plan& plan, const ModelSpec& model, std::vector<StageSetup>& stages) {
  Expected<SafetensorsFile> file = OpenSafetensors(path);
  if (!file.ok()) return file.status().WithContext("--init-weights");
  Expected<std::map<std::pair<int, std::string>, std::pair<int, std::string>>> aliases = TiedAliases(model);
  if (!aliases.ok()) return aliases.status();
  Expected<std::vector<std::set<std::string>>> transient = TransientBuffersOf(model);
  if (!transient.ok()) return transient.status();
  Status status;
  torch::NoGradGuard no_grad;
  ForEachTensor(plan, stages, [&](int layer, const std::string& name, torch::Tensor& tensor) {
    // A non-persistent buffer keeps the value the module computed when it was built.
    if (!status.ok() || (*transient)[static_cast<size_t>(layer)].count(name) > 0) return;
    const auto alias = aliases->find({layer, name});
    const std::string key = alias == aliases->end() ? WeightName(model, layer, name)
                                                    : WeightName(model, alias->second.first, alias->second.second);
    const std::string what = "layer " + std::to_string(layer) + "'s " + name;
    const SafetensorsTensor* entry = file->Find(key);
    if (entry == nullptr) {
      std::string some;
      for (const auto& [n, t] : file->tensors) {
        if (some.size() > 80) break;
        some += (some.empty() ? "" : ", ") + n;
      }
      status = Status::Invalid("--init-weights " + path + ": has no tensor \"" + key + "\" for " + what + " " +
                               c10::str(tensor.sizes()) + "; it holds " + std::to_string(file->tensors.size()) + " (" + some +
                               (file->tensors.size() > 3 ? ", ..." : "") + "): was it saved from this model?");
      return;
    }
    if (entry->shape != tensor.sizes().vec()) {
      status = Status::Invalid("--init-weights " + path + ": tensor \"" + key + "\" has shape " + c10::str(c10::IntArrayRef(entry->shape)) +
                               " where " + what + " needs " + c10::str(tensor.sizes()));
      return;
    }
    const std::optional<torch::ScalarType> dtype = TorchDtype(entry->dtype);
    if (!dtype) {
      status = Status::Invalid("--init-weights " + path + ": tensor \"" + key + "\" is " + entry->dtype +
                               ", which no layer holds");
      return;
    }
    Expected<std::vector<char>> bytes = file->Read(*entry);
    if (!bytes.ok()) {
      status = bytes.status().WithContext("--init-weights");
      return;
    }
    tensor.copy_(torch::from_blob(bytes->data(), entry->shape, torch::TensorOptions().dtype(*dtype)).to(tensor.dtype()));
  });
  return status;
}

}  // namespace gpipe::executor
