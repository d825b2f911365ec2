// Where a Hugging Face model already on this machine lives: colibri-convert --input accepts a
// directory, a hub cache entry (models--org--name, with snapshots/<revision> and refs/main) or
// `org/name` looked up in the local hub cache, the layout huggingface_hub writes:
//
//   $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//     models--org--name/refs/main            the revision main points at
//     models--org--name/snapshots/<rev>/...  config.json, *.safetensors (links into blobs/)
//
// Nothing is downloaded. Thread-safe (pure function of its arguments and the file system).
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace colibri::model {

struct HubEnvironment {
  std::string hf_hub_cache;  // $HF_HUB_CACHE
  std::string hf_home;       // $HF_HOME
  std::string home;          // $HOME
  std::filesystem::path CacheDir() const;
};

// The directory (or file) to convert for `input`:
//  - an existing file, or a directory that is not a hub cache entry: itself;
//  - a hub cache entry (has snapshots/): the snapshot refs/main names, else its only snapshot;
//  - `org/name` (not an existing path): <cache>/models--org--name resolved as above.
// NotFound naming the cache directory and the download command when `org/name` is not cached;
// FailedPrecondition when an entry has several snapshots and no refs/main, or none at all.
absl::StatusOr<std::filesystem::path> ResolveModelInput(const std::string& input,
                                                        const HubEnvironment& env);

}  // namespace colibri::model
