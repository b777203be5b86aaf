// KvLayerGroups: how a model's layers share the KV pool's blocks. The cache manager
// keeps one block table per layer group (services/cachemgr/paged_policy.h, "Window layer
// groups"): group 0 holds the full-attention layers, and each window group holds layers
// of one sliding window, whose blocks go back to the pool once the window has passed
// them. A block is a page of `num_planes` layers' K and V: the pool has num_planes
// planes (kv_cache.h), and each layer's KV lives in one plane of its group's blocks.
//
//   dense (one group):  S = num_layers planes, layer l in plane l: today's layout
//   Gemma 2 (26 layers, locals and globals alternating): S = 13; group 0 = the 13 global
//     layers in planes 0 .. 12, window group 1 = the 13 local ones in planes 0 .. 12
//   Gemma 3 (5 local per global, 26 layers: 4 global): S = 4; group 0 = the globals,
//     window groups 1 .. 6 = the 22 locals four at a time (the last uses 2 planes)
//
// So a token of a Gemma 3 sequence past its window holds 4 layers' KV instead of 26. A
// group whose state is one slot per sequence rather than blocks (Qwen3.5's linear
// attention) would join as a group of its own (docs/architecture.md). Plain values.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_KV_LAYER_GROUPS_H_
#define FOLIO_SERVICES_WORKER_ENGINE_KV_LAYER_GROUPS_H_

#include <cstdint>
#include <vector>

#include "services/worker/model/weights.h"

namespace folio::worker {

struct KvLayerGroups {
  int32_t num_planes = 0;
  std::vector<int32_t> plane;    // per layer: its plane in its group's blocks
  std::vector<int32_t> group;    // per layer: 0 (full attention) or 1 + a window group
  std::vector<int32_t> windows;  // per window group: its sliding window in tokens

  int32_t num_window_groups() const { return static_cast<int32_t>(windows.size()); }
};

// One group of every layer, each in a plane of its own.
KvLayerGroups DenseLayerGroups(int32_t num_layers);

// The window groups of a model with both sliding-window (ModelConfig::is_local) and
// full-attention layers, as in the file comment; DenseLayerGroups for any other model.
KvLayerGroups WindowLayerGroups(const ModelConfig& config);

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_KV_LAYER_GROUPS_H_
