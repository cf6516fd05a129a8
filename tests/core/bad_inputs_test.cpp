// Bad input a user really writes, one row each: a change to a good file of one format, and the
// exact one-line error the loader answers with. A row's change puts raw text at a JSON pointer (or
// removes the member), so a row can also hold what is not JSON at all, such as Python's NaN or a
// number with a unit. The files are parsed as LoadProfile, LoadCluster, LoadPlan, LoadModel and
// LoadRunRecord parse them (ParseJson, then the format's FromJson).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/json_reader.h"
#include "core/model.h"
#include "core/plan.h"
#include "core/profile.h"
#include "core/run_record.h"

namespace gpipe {
namespace {

const std::string kSource = GPIPE_SOURCE_DIR;

enum class Format { kProfile, kCluster, kPlan, kModel, kRunRecord };

// Good files, small enough to read at a glance. The plan embeds its profile and cluster.
constexpr const char* kProfile = R"({"format": "gpipe-profile/1", "model": "m", "device": "d", "microbatch_size": 2,
  "layers": [{"name": "a", "forward_ms": 1, "backward_ms": 2, "backward_weight_ms": 1, "param_bytes": 10,
              "activation_bytes": 100, "output_bytes": 8},
             {"name": "b", "forward_ms": 1, "backward_ms": 2, "param_bytes": 10, "activation_bytes": 100, "output_bytes": 8},
             {"name": "c", "forward_ms": 1, "backward_ms": 2, "param_bytes": 10, "activation_bytes": 100, "output_bytes": 8}]})";
constexpr const char* kCluster = R"({"format": "gpipe-cluster/1", "devices": 4, "device_memory_bytes": 80000000000,
  "link": {"bandwidth_bytes_per_s": 3e11, "latency_ms": 0.01},
  "nodes": {"devices_per_node": 2, "inter_node_link": {"bandwidth_bytes_per_s": 2.5e10, "latency_ms": 0.02}},
  "links": [{"from": 0, "to": 1, "bandwidth_bytes_per_s": 1e10, "latency_ms": 0.1}]})";
constexpr const char* kPlanRest = R"({"format": "gpipe-plan/1", "schedule": "1f1b", "microbatches": 2, "global_batch": 8,
  "stages": [{"layers": [0, 1], "rank": 0}, {"layers": [1, 3], "rank": 1, "remat": true}]})";
constexpr const char* kModel = R"({"format": "gpipe-model/1", "name": "m", "input": {"kind": "tokens", "vocab": 8, "seq_len": 4},
  "data": {"kind": "random-tokens"},
  "layers": [{"type": "embedding", "vocab": 8, "dim": 4, "max_seq": 4},
             {"type": "transformer-block", "dim": 4, "heads": 2},
             {"type": "lm-head", "dim": 4, "vocab": 8}]})";
constexpr const char* kRunRecord = R"({"format": "gpipe-run/1", "model": "m", "global_batch": 8, "microbatches": 2,
  "throughput_samples_per_s": 100, "steps": [{"step": 0, "loss": 4.5, "time_ms": 80}],
  "ranks": [{"rank": 0, "stages": [0], "peak_memory_bytes": 1000, "step_peak_memory_bytes": [1000],
             "actions": [{"step": 0, "action": "0F0", "start_ms": 1, "end_ms": 2.5}]}]})";

nlohmann::json GoodFile(Format format) {
  switch (format) {
    case Format::kProfile: return nlohmann::json::parse(kProfile);
    case Format::kCluster: return nlohmann::json::parse(kCluster);
    case Format::kPlan: {
      nlohmann::json plan = nlohmann::json::parse(kPlanRest);
      plan["profile"] = nlohmann::json::parse(kProfile);
      plan["cluster"] = nlohmann::json::parse(kCluster);
      return plan;
    }
    case Format::kModel: return nlohmann::json::parse(kModel);
    case Format::kRunRecord: return nlohmann::json::parse(kRunRecord);
  }
  return {};
}

const char* FileName(Format format) {
  switch (format) {
    case Format::kProfile: return "profile.json";
    case Format::kCluster: return "cluster.json";
    case Format::kPlan: return "plan.json";
    case Format::kModel: return "model.json";
    case Format::kRunRecord: return "run.json";
  }
  return "";
}

template <typename T>
std::string Verdict(const Expected<T>& loaded) {
  return loaded.ok() ? "ok" : loaded.status().message();
}

// The loader's verdict on `text`: "ok" or its error. Paths in a plan resolve against
// profiles/plans/ (as for the shipped plans), in a model against models/.
std::string Load(Format format, const std::string& text) {
  const std::string where = FileName(format);
  Expected<nlohmann::json> json = ParseJson(text, where);
  if (!json.ok()) return json.status().message();
  switch (format) {
    case Format::kProfile: return Verdict(ProfileFromJson(*json, where));
    case Format::kCluster: return Verdict(ClusterFromJson(*json, where));
    case Format::kPlan: return Verdict(PlanFromJson(*json, where, kSource + "/profiles/plans"));
    case Format::kModel: return Verdict(ModelFromJson(*json, where, kSource + "/models"));
    case Format::kRunRecord: return Verdict(RunRecordFromJson(*json, where));
  }
  return "?";
}

// One bad input: in the good file of `format`, the member at `pointer` becomes the raw text
// `value` (nullptr: the member is removed, or renamed to `rename_to`; pointer "": the whole file
// is `value`). In `error`, {source} stands for the repository's folder.
struct Row {
  Format format;
  const char* pointer;
  const char* value;
  const char* error;
  const char* rename_to = nullptr;
};

std::string BadFile(const Row& row) {
  if (std::string(row.pointer).empty()) return row.value;
  nlohmann::json json = GoodFile(row.format);
  const nlohmann::json::json_pointer pointer(row.pointer);
  if (row.value == nullptr) {
    nlohmann::json& parent = json[pointer.parent_pointer()];
    if (row.rename_to != nullptr) parent[row.rename_to] = parent[pointer.back()];
    parent.erase(pointer.back());
    return json.dump();
  }
  constexpr const char* kHole = "@@HOLE@@";
  json[pointer] = kHole;
  std::string text = json.dump();
  text.replace(text.find(std::string("\"") + kHole + "\""), std::string(kHole).size() + 2, row.value);
  return text;
}

constexpr Format P = Format::kProfile, C = Format::kCluster, L = Format::kPlan, M = Format::kModel,
                 R = Format::kRunRecord;

// clang-format off
const Row kRows[] = {
    // Profiles: times, sizes, names, the file itself.
    {P, "/layers/1/backward_workspace_bytes", "-5",
     "profile.json.layers[1].backward_workspace_bytes: expected a number >= 0, got -5"},
    {P, "/layers/1/forward_ms", "-0.5", "profile.json.layers[1].forward_ms: expected a number >= 0, got -0.5"},
    {P, "/layers/1/forward_ms", "NaN",
     "profile.json: not valid JSON: parse error at line 1, column 229: syntax error while parsing value - invalid literal; last read: '\"forward_ms\":N'; JSON has no NaN or Infinity: write a finite number (Python's json.dump writes them unless given allow_nan=False)"},
    {P, "/layers/1/backward_ms", "Infinity",
     "profile.json: not valid JSON: parse error at line 1, column 214: syntax error while parsing value - invalid literal; last read: '\"backward_ms\":I'; JSON has no NaN or Infinity: write a finite number (Python's json.dump writes them unless given allow_nan=False)"},
    {P, "/layers/1/backward_ms", "-Infinity",
     "profile.json: not valid JSON: parse error at line 1, column 215: syntax error while parsing value - invalid number; expected digit after '-'; last read: '-I'; JSON has no NaN or Infinity: write a finite number (Python's json.dump writes them unless given allow_nan=False)"},
    {P, "/layers/1/forward_ms", "1e400",
     "profile.json: not valid JSON: number overflow parsing '1e400'; numbers must lie within +-1.8e308"},
    {P, "/layers/0/forward_ms", "\"1.2ms\"",
     "profile.json.layers[0].forward_ms: expected a number, got \"1.2ms\"; the unit is milliseconds: write 1.2"},
    {P, "/layers/0/backward_ms", "\"0.5 s\"",
     "profile.json.layers[0].backward_ms: expected a number, got \"0.5 s\"; the unit is milliseconds: write 500"},
    {P, "/layers/0/backward_ms", nullptr, "profile.json.layers[0]: missing required field \"backward_ms\""},
    {P, "/layers/0/param_bytes", "\"350MB\"",
     "profile.json.layers[0].param_bytes: expected a number, got \"350MB\"; the unit is bytes: write 350000000"},
    {P, "/layers/2/activation_bytes", "-1", "profile.json.layers[2].activation_bytes: expected a number >= 0, got -1"},
    {P, "/layers/0/output_bytes", "null", "profile.json.layers[0].output_bytes: expected a number, got null"},
    {P, "/layers/0/backward_weight_ms", "3",
     "profile.json.layers[0].backward_weight_ms: is 3.000000, more than backward_ms (2.000000); it is the weight-gradient part of backward_ms"},
    {P, "/layers", "[]", "profile.json.layers: the profile has no layers; it needs at least one"},
    {P, "/layers", "{\"a\": {}}", "profile.json.layers: expected a JSON array, got {\"a\":{}}"},
    {P, "/layers/2/name", "\"a\"",
     "profile.json.layers[2].name: \"a\" names an earlier layer too; layer names must be unique"},
    {P, "/layers/0/name", "7", "profile.json.layers[0].name: expected a non-empty string, got 7"},
    {P, "/microbatch_size", "0", "profile.json.microbatch_size: expected a whole number >= 1, got 0"},
    {P, "/microbatch_size", "2.5", "profile.json.microbatch_size: expected a whole number, got 2.5"},
    {P, "/dtype", "\"FP16\"",
     "profile.json.dtype: unknown dtype \"FP16\"; known: fp32, bf16, fp16; did you mean \"fp16\"?"},
    {P, "/dtype", "\"float32\"", "profile.json.dtype: unknown dtype \"float32\"; known: fp32, bf16, fp16"},
    {P, "/format", "\"gpipe-profile/2\"",
     "profile.json.format: unsupported format \"gpipe-profile/2\"; this build reads \"gpipe-profile/1\""},
    {P, "/format", nullptr, "profile.json: missing required field \"format\" (expected \"gpipe-profile/1\")"},
    {P, "/format", "\"gpipe-cluster/1\"",
     "profile.json.format: is \"gpipe-cluster/1\", a cluster, not a profile (\"gpipe-profile/1\"); is it the wrong file?"},
    {P, "", "{\"format\": \"gpipe-profile/1\", \"model\": \"m\",}",
     "profile.json: not valid JSON: parse error at line 1, column 44: syntax error while parsing object key - unexpected '}'; expected string literal"},
    {P, "", "", "profile.json: is empty; expected a JSON object"},
    {P, "", "[{\"format\": \"gpipe-profile/1\"}]",
     "profile.json: expected a JSON object with \"format\": \"gpipe-profile/1\", got [{\"format\":\"gpipe-profile/1\"}]"},
    {P, "/layers/0/forward_ms", nullptr,
     "profile.json.layers[0]: missing required field \"forward_ms\"; is \"foward_ms\" a misspelling of it?", "foward_ms"},
    {P, "/model", "\"tiny\\ngpt\"",
     "profile.json.model: expected a string without control characters (newlines, tabs), got \"tiny\\ngpt\""},
    // Clusters: devices, memory, links.
    {C, "/devices", "0", "cluster.json.devices: expected a whole number in [1, 1048576], got 0"},
    {C, "/devices", "-8", "cluster.json.devices: expected a whole number in [1, 1048576], got -8"},
    {C, "/devices", "8.5", "cluster.json.devices: expected a whole number, got 8.5"},
    {C, "/devices", nullptr, "cluster.json: missing required field \"devices\""},
    {C, "/devices", nullptr,
     "cluster.json: missing required field \"devices\"; is \"device\" a misspelling of it?", "device"},
    {C, "/device_memory_bytes", "\"80GiB\"",
     "cluster.json.device_memory_bytes: expected a number, got \"80GiB\"; the unit is bytes: write 85899345920"},
    {C, "/device_memory_bytes", "80",
     "cluster.json.device_memory_bytes: is 80 bytes, less than 64 KiB; the unit is bytes: did you mean 80 GiB (85899345920)?"},
    {C, "/device_memory_bytes", "0",
     "cluster.json.device_memory_bytes: is 0; give each device's memory in bytes, e.g. 85899345920 for 80 GiB"},
    {C, "/link/bandwidth_bytes_per_s", "0", "cluster.json.link.bandwidth_bytes_per_s: expected a number > 0, got 0"},
    {C, "/link/bandwidth_bytes_per_s", "25",
     "cluster.json.link.bandwidth_bytes_per_s: is 25 bytes per second, slower than 100 KB/s; the unit is bytes per second: did you mean 25 GB/s (25000000000)?"},
    {C, "/link/bandwidth_bytes_per_s", "\"25 GB/s\"",
     "cluster.json.link.bandwidth_bytes_per_s: expected a number, got \"25 GB/s\"; the unit is bytes per second: write 25000000000"},
    {C, "/link/latency_ms", "-0.01", "cluster.json.link.latency_ms: expected a number >= 0, got -0.01"},
    {C, "/link/latency_ms", "\"10us\"",
     "cluster.json.link.latency_ms: expected a number, got \"10us\"; the unit is milliseconds: write 0.01"},
    {C, "/link", nullptr, "cluster.json: missing required field \"link\""},
    {C, "/nodes/devices_per_node", "3", "cluster.json.nodes.devices_per_node: 3 does not divide devices (4)"},
    {C, "/nodes/inter_node_link", nullptr, "cluster.json.nodes: missing required field \"inter_node_link\""},
    {C, "/links/0/to", "4", "cluster.json.links[0].to: expected a whole number in [0, 3], got 4"},
    {C, "/links/0/to", "0", "cluster.json.links[0].to: is 0, the same device as from; a link joins two devices"},
    {C, "/links/0/kind", "\"infiniband\"",
     "cluster.json.links[0].kind: is \"infiniband\"; expected \"nvlink\", \"pcie\" or \"same-device\", or no \"kind\" when not known"},
    {C, "/links/0/kind", "\"\"", "cluster.json.links[0].kind: expected a non-empty string, got \"\""},
    {C, "/calibration", "{\"forward_overhead_ms\": [0.1, -1]}",
     "cluster.json.calibration.forward_overhead_ms: [1] is -1; each entry is the milliseconds each action pays with "
     "that many ranks on a node, a number at least 0"},
    {C, "/calibration", "{\"backward_overhead_ms\": \"0.3ms\"}",
     "cluster.json.calibration.backward_overhead_ms: expected a number, or an array of numbers with one per count of "
     "ranks on a node, got \"0.3ms\""},
    {C, "/links/1", "{\"from\": 0, \"to\": 1, \"bandwidth_bytes_per_s\": 1e10, \"latency_ms\": 0.1}",
     "cluster.json.links[1].from: the pair 0 -> 1 is in links[0] already; give each directed pair once"},
    // Profiles: figures under tensor parallelism.
    {P, "/tensor_parallel_measurements", "[{\"tensor_parallel\": 2, \"layers\": []}]",
     "profile.json.tensor_parallel_measurements[0].layers: has 0 layers, the profile 3; give every layer's figures at "
     "this t, in order"},
    {P, "/tensor_parallel_measurements", "[{\"tensor_parallel\": 1, \"layers\": []}]",
     "profile.json.tensor_parallel_measurements[0].tensor_parallel: expected a whole number in [2, 65536], got 1"},
    {P, "/tensor_parallel_measurements", "[{\"tensor_parallel\": 2, \"layers\": [{\"name\": \"a\", \"forward_ms\": 0.5, \"backward_ms\": 1, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4, \"forward_collective_bytes\": 8, \"backward_collective_bytes\": 8}, {\"name\": \"b\", \"forward_ms\": 0.5, \"backward_ms\": 1, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4, \"forward_collective_bytes\": 8, \"backward_collective_bytes\": 8}, {\"name\": \"b\", \"forward_ms\": 0.5, \"backward_ms\": 1, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4, \"forward_collective_bytes\": 8, \"backward_collective_bytes\": 8}]}]",
     "profile.json.tensor_parallel_measurements[0].layers[2].name: \"b\" where the profile's layers[2] is \"c\"; list "
     "the layers in the profile's order"},
    {P, "/tensor_parallel_measurements", "[{\"tensor_parallel\": 2, \"layers\": [{\"name\": \"a\", \"forward_ms\": 0.5, \"backward_ms\": 1, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4, \"forward_collective_bytes\": 8, \"backward_collective_bytes\": 8}, {\"name\": \"b\", \"forward_ms\": 0.5, \"backward_ms\": 1, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4, \"forward_collective_bytes\": 8, \"backward_collective_bytes\": 8}, {\"name\": \"c\", \"forward_ms\": 1, \"backward_ms\": 2, \"param_bytes\": 5, \"activation_bytes\": 50, \"output_bytes\": 4}]}]",
     "profile.json.tensor_parallel_measurements[0].layers[2]: missing required field \"forward_collective_bytes\""},
    // Plans: schedule, stages, batch, the files they name.
    {L, "/schedule", "\"1fb1\"",
     "plan.json.schedule: unknown schedule \"1fb1\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"1f1b\"?"},
    {L, "/schedule", "\"GPipe\"",
     "plan.json.schedule: unknown schedule \"GPipe\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"gpipe\"?"},
    {L, "/schedule", "\"interleaved\"",
     "plan.json.schedule: unknown schedule \"interleaved\"; known: gpipe, 1f1b, interleaved-1f1b, zb-h1, interleaved-zb, zb-v, dualpipe-v; did you mean \"interleaved-zb\"?"},
    {L, "/stages/1/layers", "[1, 1]",
     "plan.json.stages[1].layers: [1, 1) is empty; every stage needs at least one layer"},
    {L, "/stages/1/layers", "[0, 3]",
     "plan.json.stages[1].layers: [0, 3) should start at layer 1; it overlaps the stage before"},
    {L, "/stages/1/layers", "[2, 3]",
     "plan.json.stages[1].layers: [2, 3) should start at layer 1; layers in between belong to no stage"},
    {L, "/stages/1/layers", "[1, 4]", "plan.json.stages[1].layers: [1, 4) runs past the profile's 3 layers"},
    {L, "/stages/1/layers", "[1, 2]",
     "plan.json.stages: the stages end at layer 2 but the profile has 3 layers; the last stage must end at 3"},
    {L, "/stages/0/layers", "[-1, 1]",
     "plan.json.stages[0].layers: layer indices out of range: [-1,1]; layers are numbered from 0"},
    {L, "/stages/0/layers", "[0]",
     "plan.json.stages[0].layers: expected [first, end) as two whole numbers, e.g. [0, 12], got [0]"},
    {L, "/stages/0/layers", "\"0-1\"",
     "plan.json.stages[0].layers: expected [first, end) as two whole numbers, e.g. [0, 12], got \"0-1\""},
    {L, "/stages/0/layers", "[0, 18446744073709551615]",
     "plan.json.stages[0].layers: layer indices out of range: [0,18446744073709551615]; layers are numbered from 0"},
    {L, "/stages/0/remat", "\"yes\"", "plan.json.stages[0].remat: expected true or false, got \"yes\""},
    {L, "/stages/1/rank", "2", "plan.json.stages: no stage is on rank 1; ranks must be numbered 0..K-1 without gaps"},
    {L, "/stages/1/rank", "0",
     "plan.json.schedule: \"1f1b\" runs one stage per rank, but the plan puts 2 stages on 1 ranks; use \"interleaved-1f1b\" for several stages per rank"},
    {L, "/stages", nullptr, "plan.json: missing required field \"stages\""},
    {L, "/stages", "[]", "plan.json.stages: the plan has no stages; it needs at least one"},
    {L, "/microbatches", "0", "plan.json.microbatches: expected a whole number in [1, 16777216], got 0"},
    {L, "/microbatches", nullptr,
     "plan.json: missing required field \"microbatches\"; is \"microbatch\" a misspelling of it?", "microbatch"},
    {L, "/global_batch", "7",
     "plan.json.global_batch: the global batch 7 does not split into D x M = 1 x 2 micro-batches of whole samples; use a "
     "multiple of 2"},
    {L, "/replicas", "3", "plan.json: K x D = 2 ranks x 3 replicas = 6 devices is more than the cluster's 4"},
    {L, "/tensor_parallel", "2",
     "plan.json.tensor_parallel: t = 2: the profile prices tensor parallelism t in {1} only (its "
     "tensor_parallel_measurements; profiles/generate.py writes them for transformers; a measured profile plans with t = 1)"},
    {L, "/sharded_optimizer", "true",
     "plan.json.sharded_optimizer: shards the optimizer's state over the D replicas, and the plan has 1; drop it, or "
     "plan with D >= 2"},
    {L, "/placement", "\"pipeline_major\"",
     "plan.json.placement: unknown placement \"pipeline_major\"; known: pipeline-major, replica-major; did you mean \"pipeline-major\"?"},
    {L, "/optimizer", "\"adamw\"",
     "plan.json.optimizer: unknown optimizer \"adamw\"; known: sgd, momentum, adam, adam-mixed; did you mean \"adam\"?"},
    {L, "/precision", "\"bf16\"",
     "plan.json.precision: the plan's profile was measured in fp32 (its dtype), and a plan is priced by a profile of the "
     "precision it runs in: measure one with `gpipe-plan profile --precision bf16`"},
    {L, "/precision", "\"bf8\"", "plan.json.precision: unknown precision \"bf8\"; known: fp32, bf16, fp16; did you mean \"bf16\"?"},
    {L, "/profile", "\"../tiny-gpt-cpu.json\"",
     "plan.json.stages: the stages end at layer 3 but the profile has 6 layers; the last stage must end at 6"},
    {L, "/profile", "\"../no-such-profile.json\"",
     "plan.json.profile: names \"../no-such-profile.json\", which did not load: {source}/profiles/plans/../no-such-profile.json: cannot open the file (does it exist and is it readable?)"},
    {L, "/profile", "\"\"", "plan.json.profile: is an empty path; give the object itself or the path of its JSON file"},
    {L, "/profile", "\"../tiny-gpt\\r.json\"",
     "plan.json.profile: expected a string without control characters (newlines, tabs), got \"../tiny-gpt\\r.json\""},
    {L, "/profile", "\"..\"",
     "plan.json.profile: names \"..\", which did not load: {source}/profiles/plans/..: is a directory; give the path of a JSON file"},
    {L, "/cluster", "\"../tiny-gpt-cpu.json\"",
     "plan.json.cluster: names \"../tiny-gpt-cpu.json\", which did not load: {source}/profiles/plans/../tiny-gpt-cpu.json.format: is \"gpipe-profile/1\", a profile, not a cluster (\"gpipe-cluster/1\"); is it the wrong file?"},
    {L, "/profile/layers/0/forward_ms", "-1", "plan.json.profile.layers[0].forward_ms: expected a number >= 0, got -1"},
    {L, "/format", "\"gpipe-profile/1\"",
     "plan.json.format: is \"gpipe-profile/1\", a profile, not a plan (\"gpipe-plan/1\"); is it the wrong file?"},
    // Models.
    {M, "/layers/1/type", "\"transfomer-block\"",
     "model.json.layers[1].type: unknown layer type \"transfomer-block\"; known: embedding, linear, activation, layer-norm, dropout, transformer-block, lm-head, conv2d, conv-block, batch-norm2d, max-pool2d, avg-pool2d, global-avg-pool, flatten; did you mean \"transformer-block\"?"},
    {M, "/layers/1/heads", "3",
     "model.json.layers[1].heads: 3 does not divide dim (4); pick a head count that divides it"},
    {M, "/layers/1/dropout", "1.5", "model.json.layers[1].dropout: is 1.500000; a dropout probability is in [0, 1)"},
    {M, "/layers/1/kernel", "3",
     "model.json.layers[1].kernel: a transformer-block layer has no field \"kernel\"; its fields: causal, dim, dropout, heads, mlp_ratio, name, type"},
    {M, "/layers/1", "{\"type\": \"activation\", \"function\": \"Relu\"}",
     "model.json.layers[1].function: unknown activation \"Relu\"; known: relu, gelu, tanh; did you mean \"relu\"?"},
    {M, "/layers/0/vocab", "9", "model.json.layers[0].vocab: is 9 but input.vocab is 8; make them equal"},
    {M, "/data", "{\"kind\": \"text\", \"path\": \"no-such-text.txt\"}",
     "model.json.data.path: \"{source}/models/no-such-text.txt\" is not a readable file; give a text file to train on"},
    {M, "/data", nullptr,
     "model.json.data: is missing; a model with tokens as input needs {\"kind\": \"text\", \"path\": FILE} or "
     "{\"kind\": \"random-tokens\"}"},
    {M, "/data", nullptr,
     "model.json.data: is missing; a model with tokens as input needs {\"kind\": \"text\", \"path\": FILE} or "
     "{\"kind\": \"random-tokens\"}; is \"dtaa\" a misspelling of it?", "dtaa"},
    {M, "/learning_rate", "0", "model.json.learning_rate: expected a number > 0, got 0"},
    {M, "/torchscript", "\"model.pt\"",
     "model.json: give exactly one of \"layers\" (a list of layer objects), \"torchscript\" (a scripted nn.Sequential file) or \"python\" (\"file.py:function\", a function returning an nn.Sequential)"},
    {M, "/loss", "\"mse\"", "model.json.loss: unknown loss \"mse\"; known: cross-entropy"},
    {M, "/input/kind", "\"pictures\"", "model.json.input.kind: unknown input kind \"pictures\"; known: tokens, images"},
    // Run records.
    {R, "/ranks/0/actions/0/action", "\"1F\"",
     "run.json.ranks[0].actions[0].action: \"1F\" is not an action: it must end with a micro-batch number (expected <stage><op><microbatch> such as 2F0, 1SEND_B3; ops: F B I W SEND_F RECV_F SEND_B RECV_B)"},
    {R, "/ranks/0/actions/0/end_ms", "0.5",
     "run.json.ranks[0].actions[0].end_ms: 0.500000 is before start_ms (1.000000)"},
    {R, "/steps/0/time_ms", "-1", "run.json.steps[0].time_ms: expected a number >= 0, got -1"},
    {R, "/ranks/0/stages", "[-1]", "run.json.ranks[0].stages: holds -1; stage numbers are whole numbers >= 0"},
    {R, "/ranks/0/step_peak_memory_bytes", "[\"1GB\"]",
     "run.json.ranks[0].step_peak_memory_bytes: holds \"1GB\"; byte counts are numbers in [0, 9e18]"},
    {R, "/ranks/0/step_peak_memory_bytes", "[1e300]",
     "run.json.ranks[0].step_peak_memory_bytes: holds 1e+300; byte counts are numbers in [0, 9e18]"},
    {R, "/global_batch", "0", "run.json.global_batch: expected a whole number >= 1, got 0"},
    {R, "/clock", "\"wall\"", "run.json.clock: is \"wall\"; expected \"host\" or \"cuda-events\""},
};
// clang-format on

TEST(BadInputs, EachGetsItsExactOneLineError) {
  EXPECT_GE(std::size(kRows), 50u);
  for (const Row& row : kRows) {
    const std::string text = BadFile(row);
    const std::string error = Load(row.format, text);
    std::string expected = row.error;
    if (const size_t at = expected.find("{source}"); at != std::string::npos) expected.replace(at, 8, kSource);
    EXPECT_EQ(error, expected) << FileName(row.format) << " " << row.pointer << " = "
                                << (row.value ? row.value : "(removed)");
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// What goes wrong with the file itself rather than its contents, through the loaders' file entry
// points.
TEST(BadInputs, FilesThatAreNotJsonFiles) {
  const std::string dir = testing::TempDir();  // ends with a slash
  EXPECT_EQ(LoadProfile(kSource + "/profiles").status().message(),
            kSource + "/profiles: is a directory; give the path of a JSON file");
  EXPECT_EQ(LoadCluster(dir + "absent.json").status().message(),
            dir + "absent.json: cannot open the file (does it exist and is it readable?)");
  // A million nested arrays (2 MB): refused before parsing, where copying it would overflow the stack.
  const std::string deep = dir + "deep.json";
  std::ofstream(deep) << R"({"format": "gpipe-plan/1", "notes": )" << std::string(1'000'000, '[')
                      << std::string(1'000'000, ']') << "}";
  EXPECT_EQ(LoadPlan(deep).status().message(),
            deep + ": arrays and objects nest more than 256 levels deep (at line 1, column 292); the formats nest a "
                   "few levels");
  const std::string blank = dir + "blank.json";
  std::ofstream(blank) << "\n\n";
  EXPECT_EQ(LoadRunRecord(blank).status().message(), blank + ": is empty; expected a JSON object");
}

TEST(BadInputs, TheGoodFilesLoad) {
  for (Format format : {P, C, L, M, R}) EXPECT_EQ(Load(format, GoodFile(format).dump()), "ok") << FileName(format);
}

}  // namespace
}  // namespace gpipe
