// colibri-cli: run a model from the command line (the oracle hook), verify and inspect model
// directories.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli_node.h"
#include "colibri/core/logging.h"
#include "colibri/core/units.h"
#include "colibri/flags/config_file.h"
#include "colibri/model/container.h"
#include "colibri/tokenizer/tokenizer.h"
#include "compute_node.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

// tokenize / detokenize / chat-template (cli_tokenizer.cc).
void AddTokenizerCommands(CLI::App& app);
// cache clear / stats / trace-replay (cli_cache.cc).
void AddCacheCommands(CLI::App& app);
// plan / doctor (cli_plan.cc), tune (cli_tune.cc).
void AddPlanCommands(CLI::App& app);
void AddTuneCommand(CLI::App& app);
// bench (cli_bench.cc).
void AddBenchCommand(CLI::App& app);
// chat (cli_chat.cc).
void AddChatCommand(CLI::App& app);
// mtp-logits (cli_mtp.cc).
void AddMtpCommand(CLI::App& app);

// Writes a float32 C-order .npy file of shape [rows, cols] (cli_mtp.cc writes with it too).
bool WriteNpy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols);

bool WriteNpy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) return false;
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  return static_cast<bool>(out);
}

namespace {

int Run(const NodeFlags& node_flags, const std::string& prompt_tokens,
        const std::string& prompt_text, int64_t max_tokens,
        const colibri::engine::SamplingParams& sampling, bool ignore_eos,
        const std::string& logits_out) {
  const std::string& model_dir = node_flags.options.model_dir;
  std::unique_ptr<colibri::compute::ComputeNode> created;
  if (int rc = CreateNode(node_flags, &created)) return rc;
  auto node = &created;
  colibri::engine::GenerationRequest req;
  std::unique_ptr<colibri::tokenizer::Tokenizer> tok;
  if (!prompt_tokens.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_tokens, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        spdlog::error("--prompt-tokens: '{}' is not a token id", std::string(part));
        return 2;
      }
      req.prompt.push_back(id);
    }
  } else {
    auto t = colibri::tokenizer::LoadTokenizer(model_dir);
    if (!t.ok()) {
      spdlog::error("{}", std::string(t.status().message()));
      return 1;
    }
    tok = std::move(*t);
    auto ids = tok->Encode(prompt_text, true);
    if (!ids.ok()) {
      spdlog::error("{}", std::string(ids.status().message()));
      return 2;
    }
    req.prompt = *ids;
  }
  req.sampling = sampling;
  req.max_tokens = max_tokens;
  req.ignore_eos = ignore_eos;
  req.record_logits = !logits_out.empty();
  auto result =
      (*node)->engine().Generate(req, [](const colibri::engine::SampledToken&) { return true; });
  if (!result.ok()) {
    spdlog::error("{}", std::string(result.status().message()));
    return 1;
  }
  nlohmann::json ids = result->tokens;
  std::cout << ids.dump() << std::endl;
  if (tok) std::cerr << tok->Decode(result->tokens, true) << std::endl;
  if (!logits_out.empty()) {
    const int64_t vocab = (*node)->manifest().config.vocab_size;
    if (!WriteNpy(logits_out, result->logits, static_cast<int64_t>(result->logits.size()) / vocab,
                  vocab)) {
      spdlog::error("cannot write '{}'", logits_out);
      return 1;
    }
  }
  const auto stats = (*node)->cache_stats();
  const double tps = result->decode_seconds > 0
                         ? static_cast<double>(result->tokens.size()) / result->decode_seconds
                         : 0;
  spdlog::info(
      "prompt {} tokens in {:.3f} s; {} tokens in {:.3f} s ({:.2f} tok/s); expert cache {} hits / "
      "{} misses, "
      "{} expert bytes read",
      result->prompt_tokens, result->prefill_seconds, result->tokens.size(), result->decode_seconds,
      tps, stats.hits, stats.misses, stats.bytes_fetched);
  if (result->verify_passes > 0) {
    spdlog::info(
        "speculative: {} verify passes, {} of {} drafted tokens accepted ({:.1f}%), {:.2f} tokens "
        "per pass; "
        "{:.0f} expert bytes read per generated token",
        result->verify_passes, result->accepted_draft_tokens, result->draft_tokens,
        100.0 * static_cast<double>(result->accepted_draft_tokens) /
            static_cast<double>(result->draft_tokens),
        static_cast<double>(result->accepted_draft_tokens + result->verify_passes) /
            static_cast<double>(result->verify_passes),
        static_cast<double>(stats.bytes_fetched) /
            static_cast<double>(std::max<size_t>(1, result->tokens.size())));
  }
  return 0;
}

int Verify(const std::string& model_dir) {
  auto c = colibri::model::Container::Open(model_dir);
  if (!c.ok()) {
    std::cout << "FAIL " << c.status().message() << std::endl;
    return 1;
  }
  const auto& m = (*c)->manifest();
  const std::vector<absl::Status> failed = colibri::model::VerifyModel(**c);
  for (const auto& st : failed) std::cout << "BAD " << st.message() << std::endl;
  const size_t bad = failed.size();
  if (bad > 0) {
    std::cout << bad << " bad item(s) in '" << model_dir << "'" << std::endl;
    return 1;
  }
  std::cout << "OK " << m.dense.size() << " dense tensors, " << m.experts.size()
            << " expert blocks and " << m.extra.size() << " extra tensors verified" << std::endl;
  return 0;
}

int Inspect(const std::string& model_dir) {
  auto c = colibri::model::Container::Open(model_dir);
  if (!c.ok()) {
    spdlog::error("{}", std::string(c.status().message()));
    return 1;
  }
  const auto& m = (*c)->manifest();
  std::map<std::string, uint64_t> mix;
  for (const auto& t : m.dense) mix[std::string(colibri::quant::DTypeName(t.dtype))] += t.size;
  for (const auto& b : m.experts) {
    for (const auto& p : b.parts) mix[std::string(colibri::quant::DTypeName(p.dtype))] += p.size;
  }
  nlohmann::json quant_mix = nlohmann::json::object();
  for (const auto& [k, v] : mix) quant_mix[k] = v;
  // Kept tensors the engine does not load (e.g. the NextN layer), by name.
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& t : m.extra) {
    extra[t.name] = {{"dtype", std::string(colibri::quant::DTypeName(t.dtype))},
                     {"shape", t.shape}};
  }
  nlohmann::json out = {{"name", m.name},
                        {"config", colibri::model::ConfigToJson(m.config)},
                        {"dense_bytes", m.dense_size},
                        {"expert_bytes", m.TotalExpertBytes()},
                        {"expert_blocks", m.experts.size()},
                        {"bytes_per_expert", m.experts.empty() ? 0 : m.experts[0].size},
                        {"quant_mix_bytes", quant_mix},
                        {"extra_bytes", m.extra_size},
                        {"extra_tensors", extra},
                        {"source", m.source}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging();
  CLI::App app{"colibri-cli: run, verify and inspect colibri models"};
  app.require_subcommand(1);
  AddTokenizerCommands(app);
  AddCacheCommands(app);
  AddPlanCommands(app);
  AddTuneCommand(app);
  AddBenchCommand(app);
  AddChatCommand(app);
  AddMtpCommand(app);

  std::string model_dir, prompt_tokens, prompt_text, logits_out;
  int64_t max_tokens = 32;
  bool ignore_eos = false;
  colibri::engine::SamplingParams sampling;
  NodeFlags run_node;
  auto* run =
      app.add_subcommand("run", "Generate from a prompt; prints the generated token ids as JSON");
  AddCliNodeFlags(run, &run_node);
  auto* pt =
      run->add_option("--prompt-tokens", prompt_tokens, "Prompt as comma-separated token ids");
  run->add_option("--prompt", prompt_text, "Prompt text (tokenized with the model's tokenizer)")
      ->excludes(pt);
  run->add_option("--max-tokens", max_tokens, "Tokens to generate (0: score the prompt only)")
      ->capture_default_str();
  run->add_option("--temperature", sampling.temperature, "0 = greedy")->capture_default_str();
  run->add_option("--top-p", sampling.top_p)->capture_default_str();
  run->add_option("--top-k", sampling.top_k)->capture_default_str();
  run->add_option("--min-p", sampling.min_p)->capture_default_str();
  run->add_option("--seed", sampling.seed)->capture_default_str();
  run->add_flag("--ignore-eos", ignore_eos, "Do not stop at the end-of-sequence token");
  run->add_option("--logits-out", logits_out, "Write float32 [positions, vocab] logits (.npy)");

  auto* verify =
      app.add_subcommand("verify", "Check every checksum of a model directory; names bad blocks");
  verify->add_option("--model", model_dir, "Model directory or GGUF file")->required();
  auto* inspect = app.add_subcommand("inspect", "Print a model's manifest summary as JSON");
  inspect->add_option("--model", model_dir, "Model directory or GGUF file")->required();
  std::string config_file;  // read by ExpandSubcommandConfig before parsing; here for --help
  app.add_option("--config", config_file,
                 "Read the subcommand's flags from this TOML file: top-level names for every "
                 "subcommand with that flag, [name] sections for one; the command line wins");
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    args = colibri::flags::ExpandSubcommandConfig(app, std::move(args));
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  std::vector<const char*> expanded{argv[0]};
  for (const std::string& a : args) expanded.push_back(a.c_str());
  CLI11_PARSE(app, static_cast<int>(expanded.size()), expanded.data());

  if (run->parsed()) {
    if (prompt_tokens.empty() && prompt_text.empty()) {
      spdlog::error("run: give --prompt-tokens or --prompt");
      return 2;
    }
    return Run(run_node, prompt_tokens, prompt_text, max_tokens, sampling, ignore_eos, logits_out);
  }
  if (verify->parsed()) return Verify(model_dir);
  if (inspect->parsed()) return Inspect(model_dir);
  return 2;
}
