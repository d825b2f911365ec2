// Resolves the settings a compute node was given as "auto" (ComputeNodeOptions::kAuto / -1 /
// empty policy): the planner's values for this machine and model (colibri/plan/planner.h),
// then a tune profile's (colibri/plan/tune_profile.h) for the knobs it measured, when its
// binary, model and machine fingerprints match this run (otherwise one log line says which
// differs and it is ignored). Values given explicitly are never changed. Logs every resolved
// value with its reason at start-up.
#pragma once

#include "absl/status/status.h"
#include "colibri/backend/backend.h"
#include "colibri/model/container.h"
#include "colibri/sysinfo/machine.h"
#include "compute_node.h"

namespace colibri::compute {

// AutoSettingsReport (compute_node.h): what was decided, for callers and tests.
// FailedPrecondition when the machine cannot be read (naming the flags to set explicitly);
// the planner's errors (ResourceExhausted: the model does not fit) otherwise.
// Host RAM the drafter that `options` asks for will hold (speculation self / draft / mtp),
// estimated from the manifests before it is loaded; 0 without one.
uint64_t DrafterBytes(const ComputeNodeOptions& options, const model::Manifest& manifest);

absl::StatusOr<AutoSettingsReport> ResolveAutoSettings(ComputeNodeOptions* options,
                                                       const model::Container& container,
                                                       const backend::Backend& backend,
                                                       const sysinfo::Roots& roots = {});

}  // namespace colibri::compute
