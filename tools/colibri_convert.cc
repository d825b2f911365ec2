// colibri-convert: Hugging Face checkpoints -> colibri model directory (and, with --disk, onto
// an expert store's striped disks too).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/logging.h"
#include "colibri/core/progress.h"
#include "colibri/core/units.h"
#include "colibri/model/convert.h"
#include "colibri/model/hf_hub.h"
#include "colibri/store/ingest.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  colibri::InitLogging();
  std::string input, output;
  colibri::model::ConvertOptions options;
  CLI::App app{
      "colibri-convert: convert a Hugging Face MoE checkpoint or a GGUF file into a colibri model "
      "directory"};
  app.add_option("--input", input,
                 "Hugging Face model directory (config.json + safetensors), a hub cache entry or "
                 "org/name already in "
                 "the local hub cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub), or "
                 "a .gguf file (of a "
                 "split model: its first part, -00001-of-N.gguf)")
      ->required();
  app.add_option("--output", output, "Output model directory (written atomically)")->required();
  app.add_option(
         "--quantize", options.quantize,
         "f32, f16, bf16, q8_0, q6_k, q5_k, q4_k, q3_k, q2_k, q5_k_m, q4_k_m, q3_k_m, or keep "
         "(GGUF: blocks copied; Hugging Face: the checkpoint's types, MXFP4 experts kept)")
      ->capture_default_str();
  app.add_option("--name", options.name,
                 "Model name served by the API (default: output directory name)");
  app.add_flag("--split-experts", options.split_experts, "One file per expert under experts/");
  app.add_flag("--overwrite", options.overwrite, "Replace an existing output directory");
  std::vector<std::string> disks;
  std::string stripe = std::to_string(colibri::store::kDefaultStripeSize / 1024) + "K", catalog;
  app.add_option("--disk", disks,
                 "Also stripe the experts onto these expert-store disks (repeatable; as "
                 "colibri-expert-store import)");
  app.add_option("--stripe-size", stripe, "Stripe unit with --disk (multiple of 4K)")
      ->capture_default_str();
  app.add_option("--catalog", catalog, "Store catalog with --disk (default: on the disks)");
  CLI11_PARSE(app, argc, argv);
  auto stripe_bytes = colibri::ParseSize(stripe);
  if (!stripe_bytes.ok()) {
    spdlog::error("--stripe-size: {}", std::string(stripe_bytes.status().message()));
    return 2;
  }

  // Where the input is: a path, a hub cache entry, or org/name in the local hub cache.
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  auto resolved = colibri::model::ResolveModelInput(
      input, {.hf_hub_cache = env("HF_HUB_CACHE"), .hf_home = env("HF_HOME"), .home = env("HOME")});
  if (!resolved.ok()) {
    spdlog::error("{}", std::string(resolved.status().message()));
    return 1;
  }
  const std::filesystem::path in = *resolved;
  if (in.string() != input) spdlog::info("--input {}: {}", input, in.string());
  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr));
  colibri::ProgressMeter meter("convert", stderr, tty);
  options.progress = [&](uint64_t done, uint64_t total, const std::string& what) {
    meter.Update(done, total, what);
  };
  const bool gguf = std::filesystem::is_regular_file(in);
  absl::Status st = gguf ? colibri::model::ConvertGguf(in, output, options)
                         : colibri::model::ConvertHuggingFace(in, output, options);
  if (st.ok()) meter.Finish();
  if (!st.ok() && tty) std::fprintf(stderr, "\n");
  if (!st.ok()) {
    spdlog::error("conversion failed: {}", std::string(st.message()));
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("wrote '{}' ({}) in {:.2f} s", output, options.quantize, secs);
  if (!disks.empty()) {
    // The model directory keeps the manifest and dense weights compute needs; its experts are
    // striped onto the store's disks by the store's own (atomic, resumable) import, reading
    // them back while they are still in the page cache.
    colibri::store::ImportOptions io;
    io.stripe_size = *stripe_bytes;
    io.name = options.name;
    auto r = colibri::store::ImportModel(
        output, colibri::store::StoreLocation{{disks.begin(), disks.end()}, catalog}, io);
    if (!r.ok()) {
      spdlog::error("striping onto the disks failed: {}", std::string(r.status().message()));
      return 1;
    }
    spdlog::info("striped '{}' onto {} disk(s): {} blocks, {}", r->name, disks.size(),
                 r->blocks_total, colibri::FormatSize(r->bytes_written));
  }
  return 0;
}
