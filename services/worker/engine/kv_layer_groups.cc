#include "services/worker/engine/kv_layer_groups.h"

namespace folio::worker {

KvLayerGroups DenseLayerGroups(int32_t num_layers) {
  KvLayerGroups g;
  g.num_planes = num_layers;
  for (int32_t l = 0; l < num_layers; ++l) {
    g.plane.push_back(l);
    g.group.push_back(0);
  }
  return g;
}

KvLayerGroups WindowLayerGroups(const ModelConfig& config) {
  int32_t globals = 0;
  for (int32_t l = 0; l < config.num_layers; ++l) globals += config.is_local(l) ? 0 : 1;
  const int32_t locals = config.num_layers - globals;
  if (globals == 0 || locals == 0) return DenseLayerGroups(config.num_layers);
  KvLayerGroups g;
  g.num_planes = globals;
  int32_t next_global = 0;
  int32_t next_local = 0;
  for (int32_t l = 0; l < config.num_layers; ++l) {
    if (config.is_local(l)) {
      g.plane.push_back(next_local % globals);
      g.group.push_back(1 + next_local / globals);
      ++next_local;
    } else {
      g.plane.push_back(next_global++);
      g.group.push_back(0);
    }
  }
  g.windows.assign((locals + globals - 1) / globals, config.sliding_window);
  return g;
}

}  // namespace folio::worker
