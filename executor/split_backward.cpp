#include "executor/split_backward.h"

#include <deque>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

namespace gpipe::executor {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;

constexpr size_t kNone = static_cast<size_t>(-1);

// The graph below a root, walked once: every node, who uses each node's output in the forward
// (the graph's edges reversed), and each node's owner for building edges to it.
struct Graph {
  std::unordered_map<Node*, std::vector<Node*>> users;
  std::unordered_map<Node*, std::shared_ptr<Node>> owner;

  explicit Graph(const edge_list& roots) {
    std::vector<Node*> stack;
    for (const Edge& root : roots) {
      if (owner.emplace(root.function.get(), root.function).second) stack.push_back(root.function.get());
    }
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges()) {
        if (!edge.function) continue;
        users[edge.function.get()].push_back(node);
        if (owner.emplace(edge.function.get(), edge.function).second) stack.push_back(edge.function.get());
      }
    }
  }

  const std::vector<Node*>& UsersOf(Node* node) const {
    static const std::vector<Node*> kNoUsers;
    auto it = users.find(node);
    return it == users.end() ? kNoUsers : it->second;
  }

  // Every node whose output depends on one of `starts` (the starts included).
  std::unordered_set<Node*> DependentsOf(const std::vector<Node*>& starts) const {
    std::unordered_set<Node*> closure(starts.begin(), starts.end());
    std::deque<Node*> queue(starts.begin(), starts.end());
    while (!queue.empty()) {
      Node* node = queue.front();
      queue.pop_front();
      for (Node* user : UsersOf(node)) {
        if (closure.insert(user).second) queue.push_back(user);
      }
    }
    return closure;
  }

  // Adds to `meeting` where the forward paths from `param` first enter `closure`: the nodes whose
  // backward receives the gradient that W needs for it. Whether there is any.
  bool AddMeetingPoints(Node* param, const std::unordered_set<Node*>& closure, std::set<Node*>* meeting) const {
    bool any = false;
    std::unordered_set<Node*> seen{param};
    std::deque<Node*> queue{param};
    while (!queue.empty()) {
      Node* node = queue.front();
      queue.pop_front();
      for (Node* user : UsersOf(node)) {
        if (!seen.insert(user).second) continue;
        if (closure.count(user) > 0) {
          meeting->insert(user);
          any = true;
        } else {
          queue.push_back(user);
        }
      }
    }
    return any;
  }
};

}  // namespace

WeightPass BackwardInput(const Values& outputs_in, const Values& grads, const Values& anchors,
                         const std::vector<torch::Tensor>& params, Values* anchor_grads) {
  anchor_grads->assign(anchors.size(), torch::Tensor());
  WeightPass pass;
  const auto [roots, root_grads] = BackwardRoots(outputs_in, grads);
  if (roots.empty()) return pass;
  edge_list root_edges;
  for (const torch::Tensor& root : roots) root_edges.push_back(torch::autograd::impl::gradient_edge(root));
  const Graph graph(root_edges);

  // The input path: what depends on an anchor, and the roots themselves (a parameter whose path
  // meets no anchor meets it there).
  edge_list outputs;
  std::vector<size_t> anchor_slot;  // anchors[k] -> outputs index, or kNone
  std::vector<Node*> starts;
  for (const Edge& root : root_edges) starts.push_back(root.function.get());
  for (const torch::Tensor& anchor : anchors) {
    if (!anchor.defined() || !anchor.requires_grad()) {
      anchor_slot.push_back(kNone);
      continue;
    }
    Edge edge = torch::autograd::impl::gradient_edge(anchor);
    if (graph.owner.count(edge.function.get()) == 0) {  // the root does not depend on it
      anchor_slot.push_back(kNone);
      continue;
    }
    starts.push_back(edge.function.get());
    anchor_slot.push_back(outputs.size());
    outputs.push_back(std::move(edge));
  }
  const std::unordered_set<Node*> closure = graph.DependentsOf(starts);

  // Where each parameter's path meets the input path; each meeting node's input slots are
  // captured in I.
  std::set<Node*> meeting;
  for (const torch::Tensor& param : params) {
    if (!param.requires_grad()) continue;
    Edge edge = torch::autograd::impl::gradient_edge(param);
    if (!edge.function || graph.owner.count(edge.function.get()) == 0) continue;  // not used
    if (graph.AddMeetingPoints(edge.function.get(), closure, &meeting)) pass.params.push_back(std::move(edge));
  }
  const size_t first_capture = outputs.size();
  for (Node* node : meeting) {
    for (uint32_t slot = 0; slot < node->num_inputs(); ++slot) outputs.emplace_back(graph.owner.at(node), slot);
  }
  if (outputs.empty()) return pass;

  std::vector<torch::Tensor> seeds = root_grads;
  if (seeds.empty()) {
    for (const torch::Tensor& root : roots) seeds.push_back(torch::ones_like(root));  // a scalar loss
  }
  std::vector<torch::Tensor> captured = torch::autograd::Engine::get_default_engine().execute(
      root_edges, seeds, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, outputs);

  for (size_t k = 0; k < anchors.size(); ++k) {
    if (anchor_slot[k] != kNone) (*anchor_grads)[k] = captured[anchor_slot[k]];
  }
  size_t index = first_capture;
  for (Node* node : meeting) {
    const std::shared_ptr<Node>& owner = graph.owner.at(node);
    for (uint32_t slot = 0; slot < node->num_inputs(); ++slot, ++index) {
      if (!captured[index].defined()) continue;
      pass.roots.emplace_back(owner, slot);
      pass.grads.push_back(std::move(captured[index]));
    }
    for (uint32_t e = 0; e < node->num_outputs(); ++e) {
      if (closure.count(node->next_edge(e).function.get()) > 0) pass.cuts.emplace_back(owner, e);
    }
  }
  if (pass.roots.empty()) pass = WeightPass();  // no gradient reached a parameter
  return pass;
}

int64_t WeightPass::HeldBytes(const Values& passed_on) const {
  std::unordered_set<const void*> seen;
  for (const torch::Tensor& t : passed_on) {
    if (t.defined()) seen.insert(t.storage().data());
  }
  int64_t bytes = 0;
  for (const torch::Tensor& g : grads) {
    if (g.defined() && seen.insert(g.storage().data()).second) bytes += static_cast<int64_t>(g.storage().nbytes());
  }
  return bytes;
}

void WeightPass::Run() {
  if (!roots.empty()) {
    // Not set_next_edge, which refuses a node that has parents: an empty edge needs no
    // topological number update (the node's stays an upper bound).
    for (const auto& [node, e] : cuts) node->next_edges()[e] = Edge();
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true, params);
  }
  *this = WeightPass();
}

}  // namespace gpipe::executor
