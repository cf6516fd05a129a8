#include "core/model.h"

#include <filesystem>
#include <set>

#include "core/json_reader.h"
#include "core/suggest.h"

namespace gpipe {
namespace {

constexpr NameTable<LayerType, 14> kLayerTypes = {{
    {LayerType::kEmbedding, "embedding"},
    {LayerType::kLinear, "linear"},
    {LayerType::kActivation, "activation"},
    {LayerType::kLayerNorm, "layer-norm"},
    {LayerType::kDropout, "dropout"},
    {LayerType::kTransformerBlock, "transformer-block"},
    {LayerType::kLmHead, "lm-head"},
    {LayerType::kConv2d, "conv2d"},
    {LayerType::kConvBlock, "conv-block"},
    {LayerType::kBatchNorm2d, "batch-norm2d"},
    {LayerType::kMaxPool2d, "max-pool2d"},
    {LayerType::kAvgPool2d, "avg-pool2d"},
    {LayerType::kGlobalAvgPool, "global-avg-pool"},
    {LayerType::kFlatten, "flatten"},
}};

constexpr NameTable<InputKind, 2> kInputKinds = {{{InputKind::kTokens, "tokens"}, {InputKind::kImages, "images"}}};
constexpr NameTable<DataKind, 6> kDataKinds = {{{DataKind::kText, "text"},
                                                {DataKind::kSyntheticImages, "synthetic-images"},
                                                {DataKind::kRandomTokens, "random-tokens"},
                                                {DataKind::kTokenFile, "tokens-file"},
                                                {DataKind::kMegatron, "megatron"},
                                                {DataKind::kNpyImages, "npy-images"}}};

// The whole-number fields of a layer type: required ones, and optional ones with their default
// (a default of -1 means "the value of `kernel`").
struct IntField {
  const char* key;
  int64_t LayerSpec::*member;
  int64_t min;
  bool required;
  int64_t fallback;
};
constexpr int64_t kLimit = int64_t{1} << 40;

std::vector<IntField> IntFieldsOf(LayerType type) {
  using L = LayerSpec;
  switch (type) {
    case LayerType::kEmbedding:
      return {{"vocab", &L::vocab, 1, true, 0}, {"dim", &L::dim, 1, true, 0}, {"max_seq", &L::max_seq, 1, true, 0}};
    case LayerType::kLinear:
      return {{"in", &L::in, 1, true, 0}, {"out", &L::out, 1, true, 0}};
    case LayerType::kLayerNorm:
      return {{"dim", &L::dim, 1, true, 0}};
    case LayerType::kTransformerBlock:
      return {{"dim", &L::dim, 1, true, 0}, {"heads", &L::heads, 1, true, 0}, {"mlp_ratio", &L::mlp_ratio, 1, false, 4}};
    case LayerType::kLmHead:
      return {{"dim", &L::dim, 1, true, 0}, {"vocab", &L::vocab, 1, true, 0}};
    case LayerType::kConv2d:
    case LayerType::kConvBlock:
      return {{"in", &L::in, 1, true, 0},
              {"out", &L::out, 1, true, 0},
              {"kernel", &L::kernel, 1, true, 0},
              {"stride", &L::stride, 1, false, 1},
              {"padding", &L::padding, 0, false, 0}};
    case LayerType::kBatchNorm2d:
      return {{"channels", &L::channels, 1, true, 0}};
    case LayerType::kMaxPool2d:
    case LayerType::kAvgPool2d:
      return {{"kernel", &L::kernel, 1, true, 0}, {"stride", &L::stride, 1, false, -1}};
    case LayerType::kActivation:
    case LayerType::kDropout:
    case LayerType::kGlobalAvgPool:
    case LayerType::kFlatten:
      return {};
  }
  return {};
}

Expected<LayerSpec> LayerFromJson(const nlohmann::json& json, const std::string& where, int index) {
  if (!json.is_object()) return Status::Invalid(where + ": is " + Describe(json) + "; each layer is an object");
  ObjectReader r(json, where);
  const std::string type_name = r.String("type");
  if (!r.status().ok()) return r.status();
  Expected<LayerType> type = ParseName(kLayerTypes, type_name, "layer type");
  if (!type.ok()) return type.status().WithContext(r.Where("type"));
  LayerSpec layer;
  layer.type = *type;
  layer.name = r.OptionalString("name", type_name + std::to_string(index));
  std::set<std::string> known = {"type", "name"};
  for (const IntField& f : IntFieldsOf(layer.type)) {
    known.insert(f.key);
    if (f.required) {
      layer.*f.member = r.Integer(f.key, f.min, kLimit);
    } else {
      layer.*f.member = r.OptionalInteger(f.key, f.min, kLimit, f.fallback == -1 ? layer.kernel : f.fallback);
    }
  }
  if (layer.type == LayerType::kLinear) {
    layer.bias = r.OptionalBool("bias", true);
    known.insert("bias");
  }
  if (layer.type == LayerType::kTransformerBlock) {
    layer.causal = r.OptionalBool("causal", true);
    layer.dropout = r.OptionalNumber("dropout", 0.0).value_or(0.0);
    known.insert({"causal", "dropout"});
    if (r.status().ok() && layer.dim % layer.heads != 0) {
      r.Fail("heads", std::to_string(layer.heads) + " does not divide dim (" + std::to_string(layer.dim) +
                          "); pick a head count that divides it");
    }
  }
  if (layer.type == LayerType::kDropout) {
    layer.dropout = r.Number("p", 0.0);
    known.insert("p");
  }
  if ((layer.type == LayerType::kDropout || layer.type == LayerType::kTransformerBlock) && r.status().ok() &&
      layer.dropout >= 1.0) {
    r.Fail(layer.type == LayerType::kDropout ? "p" : "dropout",
           "is " + std::to_string(layer.dropout) + "; a dropout probability is in [0, 1)");
  }
  if (layer.type == LayerType::kActivation) {
    layer.function = r.String("function");
    known.insert("function");
    if (r.status().ok() && layer.function != "relu" && layer.function != "gelu" && layer.function != "tanh") {
      r.Fail("function", "unknown activation \"" + layer.function + "\"; known: " +
                             ChoicesAndSuggestion(layer.function, {"relu", "gelu", "tanh"}));
    }
  }
  if (!r.status().ok()) return r.status();
  for (const auto& [key, value] : json.items()) {
    if (known.count(key) == 0) {
      // The key is the user's text: quoted (escaped, cut) so that the message stays one line.
      const std::string quoted = Quote(key);
      const bool plain = quoted == "\"" + key + "\"";
      std::vector<std::string> names(known.begin(), known.end());
      return Status::Invalid((plain ? r.Where(key) : where) + ": a " + type_name + " layer has no field " + quoted +
                             "; its fields: " + ChoicesAndSuggestion(key, names));
    }
  }
  return layer;
}

// Whether `path` names a regular file; false, never an exception, for a path the system refuses
// (too long, a component that is not a folder).
bool IsRegularFile(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

ModelInput InputFromJson(ObjectReader& parent) {
  ModelInput input;
  const nlohmann::json* json = parent.Object("input");
  if (json == nullptr) return input;
  ObjectReader r(*json, parent.Where("input"));
  Expected<InputKind> kind = ParseName(kInputKinds, r.String("kind"), "input kind");
  if (r.status().ok() && !kind.ok()) r.Fail(kind.status().WithContext(r.Where("kind")));
  if (r.status().ok()) input.kind = *kind;
  if (r.status().ok() && input.kind == InputKind::kTokens) {
    input.vocab = r.Integer("vocab", 1, kLimit);
    input.seq_len = r.Integer("seq_len", 1, kLimit);
  } else if (r.status().ok()) {
    input.channels = r.Integer("channels", 1, kLimit);
    input.height = r.Integer("height", 1, kLimit);
    input.width = r.Integer("width", 1, kLimit);
    input.classes = r.Integer("classes", 2, kLimit);
  }
  parent.Fail(r.status());
  return input;
}

// `path` resolved against the model file's folder.
std::string Resolve(const std::string& base_dir, const std::string& path) {
  std::filesystem::path p(path);
  return p.is_absolute() || base_dir.empty() ? path : (std::filesystem::path(base_dir) / p).string();
}

// The file field `key` of `r`, resolved; a missing file is an error naming the field.
std::string ExistingFile(ObjectReader& r, const char* key, const std::string& base_dir, const std::string& what,
                         const std::string& suffix = "") {
  const std::string path = r.String(key);
  if (!r.status().ok()) return "";
  const std::string resolved = Resolve(base_dir, path);
  if (!IsRegularFile(resolved + suffix)) {
    r.Fail(key, "\"" + resolved + suffix + "\" is not a readable file; give " + what);
  }
  return resolved;
}

// The files of a data kind that lives in files: the training data, or a validation set of the
// same kind (`data.validation`).
void DataFilesFromJson(ObjectReader& r, DataSpec& data, const std::string& base_dir) {
  switch (data.kind) {
    case DataKind::kText: data.path = ExistingFile(r, "path", base_dir, "a text file to train on"); break;
    case DataKind::kTokenFile:
      data.path = ExistingFile(r, "path", base_dir, "a file of token ids (nanoGPT's train.bin; scripts/prepare_tokens.py)");
      break;
    case DataKind::kMegatron:
      data.path = ExistingFile(r, "path", base_dir, "the prefix of a Megatron dataset (PREFIX.bin and PREFIX.idx)", ".idx");
      if (r.status().ok() && !IsRegularFile(data.path + ".bin")) {
        r.Fail("path", "\"" + data.path + ".bin\" is not a readable file; a Megatron dataset is PREFIX.bin and PREFIX.idx");
      }
      break;
    case DataKind::kNpyImages:
      data.path = ExistingFile(r, "images", base_dir, "a .npy file of uint8 images [N, H, W, C]");
      data.labels_path = ExistingFile(r, "labels", base_dir, "a .npy file of int64 labels [N]");
      break;
    case DataKind::kSyntheticImages:
    case DataKind::kRandomTokens: break;
  }
}

nlohmann::json DataFilesToJson(const DataSpec& data) {
  nlohmann::json json = {{"kind", NameOf(kDataKinds, data.kind)}};
  switch (data.kind) {
    case DataKind::kTokenFile: json["dtype"] = data.dtype; [[fallthrough]];
    case DataKind::kText:
    case DataKind::kMegatron: json["path"] = data.path; break;
    case DataKind::kNpyImages: json["images"] = data.path; json["labels"] = data.labels_path; break;
    case DataKind::kSyntheticImages:
    case DataKind::kRandomTokens: break;
  }
  return json;
}

const std::set<std::string> kDataFields = {"kind", "path", "dtype", "images", "labels", "validation",
                                           "validation_fraction"};

DataSpec DataFromJson(ObjectReader& parent, const ModelInput& input, const std::string& base_dir) {
  DataSpec data;
  data.kind = input.kind == InputKind::kTokens ? DataKind::kText : DataKind::kSyntheticImages;
  const nlohmann::json* json = parent.OptionalObject("data");
  if (json == nullptr && parent.status().ok() && input.kind == InputKind::kTokens) {
    // The default for tokens is text, and text needs a file: without one neither run nor profile
    // has anything to feed the model.
    parent.Fail("data", "is missing; a model with tokens as input needs {\"kind\": \"text\", \"path\": FILE} or "
                        "{\"kind\": \"random-tokens\"}" + parent.MisspeltHint("data"));
  }
  if (json == nullptr || !parent.status().ok()) return data;
  ObjectReader r(*json, parent.Where("data"));
  r.SetKnownFields(kDataFields);
  Expected<DataKind> kind = ParseName(kDataKinds, r.String("kind"), "data kind");
  if (r.status().ok() && !kind.ok()) r.Fail(kind.status().WithContext(r.Where("kind")));
  if (r.status().ok()) data.kind = *kind;
  const bool images = data.kind == DataKind::kSyntheticImages || data.kind == DataKind::kNpyImages;
  if (r.status().ok() && images != (input.kind == InputKind::kImages)) {
    r.Fail("kind", std::string("\"") + NameOf(kDataKinds, data.kind) + "\" data does not feed \"" +
                       NameOf(kInputKinds, input.kind) + "\" input; use " +
                       (images ? "\"text\", \"tokens-file\", \"megatron\" or \"random-tokens\""
                               : "\"npy-images\" or \"synthetic-images\""));
  }
  if (r.status().ok() && data.kind == DataKind::kTokenFile) {
    data.dtype = r.OptionalString("dtype", "uint16");
    if (r.status().ok() && data.dtype != "uint16" && data.dtype != "uint32") {
      r.Fail("dtype", "is \"" + data.dtype + "\"; a token file holds \"uint16\" or \"uint32\" ids");
    }
  }
  if (r.status().ok()) DataFilesFromJson(r, data, base_dir);
  const bool synthetic = data.kind == DataKind::kSyntheticImages || data.kind == DataKind::kRandomTokens;
  if (r.status().ok() && r.Has("validation_fraction")) {
    data.validation_fraction = r.Number("validation_fraction", 0.0);
    if (r.status().ok() && (data.validation_fraction <= 0 || data.validation_fraction >= 1)) {
      r.Fail("validation_fraction", "is " + Describe(*r.Raw("validation_fraction")) +
                                        "; give the share of the data held out for evaluation, in (0, 1)");
    }
  }
  if (const nlohmann::json* validation = r.OptionalObject("validation"); validation != nullptr && r.status().ok()) {
    if (data.validation_fraction > 0) r.Fail("validation", "and validation_fraction are both given; keep one");
    ObjectReader v(*validation, r.Where("validation"));
    auto held_out = std::make_shared<DataSpec>();
    held_out->kind = data.kind;
    held_out->dtype = data.dtype;
    if (synthetic) {
      v.Fail("kind", std::string("\"") + NameOf(kDataKinds, data.kind) + "\" data has no files to validate on; " +
                         "validation draws other samples of it by itself");
    }
    if (v.status().ok()) DataFilesFromJson(v, *held_out, base_dir);
    r.Fail(v.status());
    data.validation = std::move(held_out);
  }
  parent.Fail(r.status());
  return data;
}

const std::set<std::string> kKnownTop = {"format", "name", "input", "data", "loss", "seed",
                                         "learning_rate", "training", "layers", "torchscript", "python"};

}  // namespace

const char* LayerTypeName(LayerType type) { return NameOf(kLayerTypes, type); }

int64_t CharToken(unsigned char c) {
  if (c == '\n') return 0;
  if (c >= 32 && c <= 126) return c - 31;
  return 1;
}

Expected<ModelSpec> ModelFromJson(const nlohmann::json& json, const std::string& where,
                                  const std::string& base_dir) {
  GPIPE_RETURN_IF_ERROR(CheckFormat(json, where, kModelFormat));
  ObjectReader r(json, where);
  r.SetKnownFields(kKnownTop);
  ModelSpec model;
  model.name = r.String("name");
  model.input = InputFromJson(r);
  model.data = DataFromJson(r, model.input, base_dir);
  model.loss = r.OptionalString("loss", "cross-entropy");
  if (r.status().ok() && model.loss != "cross-entropy") {
    r.Fail("loss", "unknown loss \"" + model.loss + "\"; known: " + ChoicesAndSuggestion(model.loss, {"cross-entropy"}));
  }
  model.seed = static_cast<uint64_t>(r.OptionalInteger("seed", 0, INT64_MAX, 1234));
  const bool legacy_learning_rate = r.Has("learning_rate");
  const double learning_rate = legacy_learning_rate ? r.NumberAbove("learning_rate", 0.0) : 0.0;
  model.training = TrainingFromJson(r, legacy_learning_rate, learning_rate);
  if (!r.status().ok()) return r.status();
  const int sources = (r.Has("layers") ? 1 : 0) + (r.Has("torchscript") ? 1 : 0) + (r.Has("python") ? 1 : 0);
  if (sources != 1) {
    return Status::Invalid(where + ": give exactly one of \"layers\" (a list of layer objects), \"torchscript\" "
                                   "(a scripted nn.Sequential file) or \"python\" (\"file.py:function\", a function "
                                   "returning an nn.Sequential)");
  }
  if (r.Has("python")) {
    const std::string text = r.String("python");
    if (!r.status().ok()) return r.status();
    const size_t colon = text.rfind(':');
    const std::string file = colon == std::string::npos ? text : text.substr(0, colon);
    model.python_function = colon == std::string::npos ? "build" : text.substr(colon + 1);
    if (file.empty() || model.python_function.empty()) {
      return Status::Invalid(r.Where("python") + ": \"" + text + "\" is not \"file.py:function\", e.g. \"gpt2.py:build\"");
    }
    model.python_path = Resolve(base_dir, file);
    if (!IsRegularFile(model.python_path)) {
      return Status::Invalid(r.Where("python") + ": \"" + model.python_path +
                             "\" is not a readable file; name a Python file whose function returns an nn.Sequential");
    }
  } else if (r.Has("torchscript")) {
    const std::string path = r.String("torchscript");
    if (!r.status().ok()) return r.status();
    model.torchscript_path = Resolve(base_dir, path);
    if (!IsRegularFile(model.torchscript_path)) {
      return Status::Invalid(r.Where("torchscript") + ": \"" + model.torchscript_path +
                             "\" is not a readable file; save one with torch.jit.script(nn.Sequential(...)).save(path)");
    }
  } else {
    const nlohmann::json* layers = r.Array("layers");
    if (!r.status().ok()) return r.status();
    if (layers->empty()) return Status::Invalid(r.Where("layers") + ": the model has no layers; it needs at least one");
    std::set<std::string> names;
    for (size_t i = 0; i < layers->size(); ++i) {
      const std::string layer_where = r.Where("layers") + "[" + std::to_string(i) + "]";
      Expected<LayerSpec> layer = LayerFromJson((*layers)[i], layer_where, static_cast<int>(i));
      if (!layer.ok()) return layer.status();
      if (!names.insert(layer->name).second) {
        return Status::Invalid(layer_where + ".name: \"" + layer->name +
                               "\" names an earlier layer too; layer names must be unique");
      }
      model.layers.push_back(std::move(*layer));
    }
    const LayerSpec& first = model.layers.front();
    if (model.input.kind == InputKind::kTokens && first.type == LayerType::kEmbedding) {
      if (first.vocab != model.input.vocab) {
        return Status::Invalid(r.Where("layers") + "[0]" + ".vocab: is " + std::to_string(first.vocab) +
                               " but input.vocab is " + std::to_string(model.input.vocab) + "; make them equal");
      }
      if (first.max_seq < model.input.seq_len) {
        return Status::Invalid(r.Where("layers") + "[0]" + ".max_seq: is " + std::to_string(first.max_seq) +
                               ", shorter than input.seq_len (" + std::to_string(model.input.seq_len) + ")");
      }
    }
  }
  model.extra = UnknownFields(json, kKnownTop);
  return model;
}

Expected<ModelSpec> LoadModel(const std::string& path) {
  Expected<nlohmann::json> json = LoadJsonFile(path);
  if (!json.ok()) return json.status();
  return ModelFromJson(*json, path, std::filesystem::path(path).parent_path().string());
}

nlohmann::json ModelToJson(const ModelSpec& model) {
  nlohmann::json json = model.extra;
  json["format"] = kModelFormat;
  json["name"] = model.name;
  nlohmann::json input = {{"kind", NameOf(kInputKinds, model.input.kind)}};
  if (model.input.kind == InputKind::kTokens) {
    input["vocab"] = model.input.vocab;
    input["seq_len"] = model.input.seq_len;
  } else {
    input["channels"] = model.input.channels;
    input["height"] = model.input.height;
    input["width"] = model.input.width;
    input["classes"] = model.input.classes;
  }
  json["input"] = input;
  nlohmann::json data = DataFilesToJson(model.data);
  if (model.data.validation_fraction > 0) data["validation_fraction"] = model.data.validation_fraction;
  if (model.data.validation) {
    data["validation"] = DataFilesToJson(*model.data.validation);
    data["validation"].erase("kind");
  }
  json["data"] = data;
  json["loss"] = model.loss;
  json["seed"] = model.seed;
  json["training"] = TrainingToJson(model.training);
  if (!model.python_path.empty()) {
    json["python"] = model.python_path + ":" + model.python_function;
    return json;
  }
  if (!model.torchscript_path.empty()) {
    json["torchscript"] = model.torchscript_path;
    return json;
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerSpec& layer : model.layers) {
    nlohmann::json l = {{"type", LayerTypeName(layer.type)}, {"name", layer.name}};
    for (const IntField& f : IntFieldsOf(layer.type)) l[f.key] = layer.*f.member;
    switch (layer.type) {
      case LayerType::kLinear: l["bias"] = layer.bias; break;
      case LayerType::kTransformerBlock: l["causal"] = layer.causal; l["dropout"] = layer.dropout; break;
      case LayerType::kDropout: l["p"] = layer.dropout; break;
      case LayerType::kActivation: l["function"] = layer.function; break;
      default: break;
    }
    layers.push_back(std::move(l));
  }
  json["layers"] = std::move(layers);
  return json;
}

}  // namespace gpipe
