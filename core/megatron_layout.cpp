#include "core/megatron_layout.h"

#include <algorithm>
#include <cctype>

#include "core/schedule/placement.h"

namespace gpipe {
namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool NamedLike(const std::string& name, std::initializer_list<const char*> words) {
  const std::string lower = Lower(name);
  return std::any_of(words.begin(), words.end(), [&](const char* w) { return lower.find(w) != std::string::npos; });
}

// "ttttt" -> "t*5"; shorter runs stay as written.
std::string Compress(const std::string& symbols) {
  std::string out;
  for (size_t i = 0; i < symbols.size();) {
    size_t j = i;
    while (j < symbols.size() && symbols[j] == symbols[i]) ++j;
    const size_t run = j - i;
    out += run >= 3 ? std::string(1, symbols[i]) + "*" + std::to_string(run) : symbols.substr(i, run);
    i = j;
  }
  return out;
}

}  // namespace

Expected<std::string> MegatronLayout(const Plan& plan) {
  if (LayoutOf(plan.schedule) == StageLayout::kV) {
    return Status::Invalid(std::string(ScheduleName(plan.schedule)) +
                           " places its stages in a V (stage 2K-1-s on rank s); Megatron's layout puts stage s on "
                           "rank s mod K, so it cannot say this plan (export it with --format pytorch-csv)");
  }
  const auto& layers = plan.profile.layers;
  const int last = plan.profile.num_layers() - 1;
  if (last < 1 || !NamedLike(layers[0].name, {"emb", "wte", "tok"})) {
    return Status::Invalid("Megatron's layouts describe GPT-like models whose first layer is the embedding ('E'); "
                           "the profile's layers[0] is \"" + (last >= 0 ? layers[0].name : std::string()) +
                           "\" (a name with \"emb\", \"wte\" or \"tok\" in it marks the embedding)");
  }
  if (!NamedLike(layers[last].name, {"head", "loss", "output", "lm", "logits"})) {
    return Status::Invalid("Megatron's layouts end with the output layer and loss ('L'); the profile's layers[" +
                           std::to_string(last) + "] is \"" + layers[last].name +
                           "\" (a name with \"head\", \"lm\", \"output\", \"logits\" or \"loss\" in it marks it)");
  }
  std::string layout;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    std::string symbols;
    for (int l = plan.stages[s].first_layer; l < plan.stages[s].end_layer; ++l) {
      symbols += l == 0 ? 'E' : l == last ? 'L' : 't';
    }
    layout += (s > 0 ? "|" : "") + Compress(symbols);
  }
  return layout;
}

Expected<std::string> MegatronFlags(const Plan& plan) {
  Expected<std::string> layout = MegatronLayout(plan);
  if (!layout.ok()) return layout.status();
  std::string flags;
  if (plan.tensor_parallel > 1) {
    // The profile's figures for t assume sequence parallelism (profiles/generate.py).
    flags += "--tensor-model-parallel-size " + std::to_string(plan.tensor_parallel) + " --sequence-parallel ";
  }
  flags += "--pipeline-model-parallel-size " + std::to_string(plan.num_ranks()) + " --pipeline-model-parallel-layout \"" +
           *layout + "\"";
  if (plan.sharded_optimizer) flags += " --use-distributed-optimizer";
  return flags;
}

}  // namespace gpipe
