// The adaptive cache policy (cache_policy.h describes it); built by MakeCachePolicy.
#pragma once

#include <memory>

#include "colibri/expert_source/cache_policy.h"

namespace colibri::expert_source {

std::unique_ptr<CachePolicy> MakeAdaptivePolicy(const CachePolicyParams& params);

}  // namespace colibri::expert_source
