#pragma once
/// What peerlab knows of NVIDIA GPU models by name: a short name for machine kinds ("h200"), the compute capability
/// (for "this build holds no code for sm_70" before anything runs), and the machine kind derived from the hardware
/// (GPU model x count x interconnect, e.g. "h200-x2-nvswitch") that a run is filed under when no kind is given.

#include <optional>
#include <string>
#include <string_view>

#include "harness/qualify/plan.h"

namespace peerlab::qualify {

struct GpuModelInfo {
  std::string short_name;         ///< "h200", "a100", "rtx3090", "t4"; a sanitized model name when unknown
  std::optional<int> capability;  ///< compute capability as major * 10 + minor (90 for sm_90); nullopt when unknown
};

/// Identifies a model as topology sources name it: "NVIDIA H200", "Tesla V100-SXM3-32GB-H", "NVIDIA GeForce RTX 3090",
/// or "NVIDIA 10de:2335" when only the PCI ids are known.
GpuModelInfo identifyGpu(std::string_view model);

/// The machine kind derived from the hardware and how: {"h200-x2-nvswitch", "derived from 2x NVIDIA H200, NVLink
/// through NVSwitch"}. The interconnect is nvswitch (NVLink through NVSwitches), nvlink (direct NVLink between some
/// pairs), pcie (no NVLink), or left out when the topology cannot tell or there is one GPU; never the host name.
struct DerivedKind {
  std::string kind;
  std::string source;
};
DerivedKind deriveKind(const PlanTopology& topo);

/// The kind a run is filed under: `option` (--kind) when given, else $PEERLAB_KIND, else derived; `source` says which
/// ("--kind", "PEERLAB_KIND", "derived from ...").
DerivedKind chooseKind(const std::string& option, const PlanTopology& topo);

/// Whether binaries built for `architectures` (CMAKE_CUDA_ARCHITECTURES, "75-real,90" or "75-real;90") hold code a
/// GPU of `capability` runs: machine code of the same major version and a minor version not above it, or PTX of a
/// version not above it. nullopt when the list cannot be read ("native", "all").
std::optional<bool> buildRunsOn(std::string_view architectures, int capability);

/// For a plan's GPUs: "this build holds no code for sm_70 (16x Tesla V100-SXM3-32GB-H; built for 75-real,90)" when
/// some GPU of a known model has no code in `architectures`, "" otherwise.
std::string missingKernelCode(const PlanTopology& topo, std::string_view architectures);

}  // namespace peerlab::qualify
