// colibri-cli mtp-logits: the logits of a model's MTP / NextN layer at every prompt position
// (the reference hook for tests/reference: the layer checked against a numpy implementation).
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli_node.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/core/status.h"
#include "colibri/engine/model.h"
#include "colibri/model/container.h"
#include "colibri/store/striped_source.h"

// colibri_cli.cc
bool WriteNpy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols);

namespace {

namespace engine = colibri::engine;

// Row j of the result: the MTP layer's logits at position j, its input the target's hidden
// state at j (the prompt in one pass) and the prompt's token j + 1: [n - 1, vocab].
absl::StatusOr<std::vector<float>> MtpLogits(const std::string& dir,
                                             const std::vector<int32_t>& prompt, int threads) {
  if (prompt.size() < 2) return absl::InvalidArgumentError("mtp-logits: give at least 2 tokens");
  ASSIGN_OR_RETURN(auto container, colibri::model::Container::Open(dir));
  auto be = colibri::backend::CreateCpuBackend({.threads = threads});
  ASSIGN_OR_RETURN(auto disk, colibri::store::StripedSource::OpenLocal(container.get(), {}));
  ASSIGN_OR_RETURN(auto model, engine::Model::Load(*container, be.get(), disk.get()));
  ASSIGN_OR_RETURN(auto mtp, model->LoadMtp(*container));
  const int64_t n = static_cast<int64_t>(prompt.size()) - 1;
  auto cache = model->NewCache();
  std::vector<engine::BatchItem> batch;
  for (int64_t i = 0; i < n; ++i)
    batch.push_back({cache.get(), prompt[static_cast<size_t>(i)], static_cast<int32_t>(i), false});
  std::vector<float> hidden;
  const engine::HiddenIo out{nullptr, &hidden};
  RETURN_IF_ERROR(model->Forward(batch, nullptr, nullptr, &out));
  auto mcache = mtp->NewCache();
  batch.clear();
  for (int64_t j = 0; j < n; ++j) {
    batch.push_back(
        {mcache.get(), prompt[static_cast<size_t>(j + 1)], static_cast<int32_t>(j), true});
  }
  std::vector<float> logits;
  const engine::HiddenIo in{hidden.data(), nullptr};
  RETURN_IF_ERROR(mtp->Forward(batch, &logits, nullptr, &in));
  return logits;
}

}  // namespace

void AddMtpCommand(CLI::App& app) {
  struct Flags {
    std::string model_dir, prompt_tokens, out;
    int threads = 2;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "mtp-logits",
      "Write the model's MTP/NextN layer logits at every prompt position as float32 "
      "[n - 1, vocab] (.npy)");
  cmd->add_option("--model", flags->model_dir, "Model directory")->required();
  cmd->add_option("--prompt-tokens", flags->prompt_tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", flags->out, "The .npy file to write")->required();
  cmd->add_option("--threads", flags->threads, "CPU threads")->capture_default_str();
  cmd->callback([flags] {
    std::vector<int32_t> prompt;
    for (absl::string_view part :
         absl::StrSplit(flags->prompt_tokens, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id))
        Fail(2, absl::StrCat("--prompt-tokens: '", std::string(part), "' is not a token id"));
      prompt.push_back(id);
    }
    auto logits = MtpLogits(flags->model_dir, prompt, flags->threads);
    if (!logits.ok()) Fail(1, std::string(logits.status().message()));
    const int64_t rows = static_cast<int64_t>(prompt.size()) - 1;
    if (!WriteNpy(flags->out, *logits, rows, static_cast<int64_t>(logits->size()) / rows))
      Fail(1, "cannot write '" + flags->out + "'");
    throw CLI::RuntimeError(0);  // main()'s exit status (cli_node.h: Fail)
  });
}
