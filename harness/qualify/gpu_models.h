#pragma once
/// Which GPUs a build runs on: the compute capability of each model (harness/report/machine.h names the models and
/// derives the machine kind) against the build's CUDA architectures, for "this build holds no code for sm_70" before
/// anything runs.

#include <optional>
#include <string>
#include <string_view>

#include "harness/qualify/plan.h"
#include "harness/report/machine.h"

namespace peerlab::qualify {

using report::DerivedKind;
using report::deriveKind;
using report::GpuModelInfo;
using report::identifyGpu;

/// Whether binaries built for `architectures` (CMAKE_CUDA_ARCHITECTURES, "75-real,90" or "75-real;90") hold code a
/// GPU of `capability` runs: machine code of the same major version and a minor version not above it, or PTX of a
/// version not above it. nullopt when the list cannot be read ("native", "all").
std::optional<bool> buildRunsOn(std::string_view architectures, int capability);

/// For a plan's GPUs: "this build holds no code for sm_70 (16x Tesla V100-SXM3-32GB-H; built for 75-real,90)" when
/// some GPU of a known model has no code in `architectures`, "" otherwise.
std::string missingKernelCode(const PlanTopology& topo, std::string_view architectures);

}  // namespace peerlab::qualify
