// Loading Hugging Face tokenizer.json + tokenizer_config.json (+ generation_config.json) into
// a pipeline, and LoadTokenizer's dispatch between model directories and GGUF files.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/tokenizer/gguf_tokenizer.h"
#include "colibri/tokenizer/tokenizer.h"
#include "pipeline.h"

namespace colibri::tokenizer {
namespace {

using internal::AddedToken;
using internal::Json;
using internal::PipelineParts;

// "<s>" or {"content": "<s>", ...} (tokenizer_config.json writes both); "" for null/absent.
std::string TokenContent(const Json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const Json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

int32_t ResolveId(const PipelineParts& parts, const std::string& content) {
  if (content.empty()) return -1;
  for (const AddedToken& t : parts.added) {
    if (t.content == content) return t.id;
  }
  auto id = parts.model->TokenToId(content);
  return id.has_value() ? *id : -1;
}

// Special tokens named by a post-processor: {"SpecialToken": {"id": "<s>"}} entries of a
// TemplateProcessing "single" list (resolved through its "special_tokens" map), or the
// cls/sep pairs of Roberta/Bert processing.
absl::Status ParsePostProcessor(const Json& j, PipelineParts* parts) {
  if (j.is_null()) return absl::OkStatus();
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type == "Sequence") {
    for (const auto& p : j.value("processors", Json::array()))
      RETURN_IF_ERROR(ParsePostProcessor(p, parts));
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const Json& cls = j.value("cls", Json());
    const Json& sep = j.value("sep", Json());
    if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("post_processor ", type, ": cls/sep must be [token, id]"));
    }
    parts->prefix_ids.push_back(cls[1].get<int32_t>());
    parts->suffix_ids.push_back(sep[1].get<int32_t>());
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    const Json& single = j.value("single", Json::array());
    const Json& specials = j.value("special_tokens", Json::object());
    bool seen_sequence = false;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken")) {
        return absl::InvalidArgumentError(
            "post_processor TemplateProcessing: unknown item in \"single\"");
      }
      std::string name = item["SpecialToken"].value("id", "");
      if (!specials.contains(name) || !specials[name].contains("ids") ||
          !specials[name]["ids"].is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "post_processor TemplateProcessing: special token '", name, "' has no ids"));
      }
      for (const auto& id : specials[name]["ids"]) {
        (seen_sequence ? parts->suffix_ids : parts->prefix_ids).push_back(id.get<int32_t>());
      }
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported post_processor '", type,
                   "' (supported: TemplateProcessing, ByteLevel, RobertaProcessing, "
                   "BertProcessing, Sequence)"));
}

absl::StatusOr<PipelineParts> PartsFromJsonUnchecked(const Json& tj, const Json& cfg,
                                                     const Json& gen) {
  PipelineParts parts;
  const Json& model = tj.value("model", Json());
  if (!model.is_object()) return absl::InvalidArgumentError("no \"model\" object");
  std::string type = model.value("type", "BPE");
  if (type != "BPE") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported model type '", type, "' (supported: BPE)"));
  }
  {
    auto n = internal::MakeNormalizer(tj.value("normalizer", Json()));
    if (!n.ok()) return Annotate(n.status(), "normalizer");
    parts.normalizer = std::move(*n);
  }
  {
    auto p = internal::MakePreTokenizer(tj.value("pre_tokenizer", Json()));
    if (!p.ok()) return Annotate(p.status(), "pre_tokenizer");
    parts.pre = std::move(*p);
  }
  {
    auto m = internal::MakeBpeModelFromJson(model, parts.pre.byte_level);
    if (!m.ok()) return Annotate(m.status(), "model");
    parts.model = std::move(*m);
  }
  {
    auto d = internal::MakeDecoder(tj.value("decoder", Json()));
    if (!d.ok()) return Annotate(d.status(), "decoder");
    parts.decoder = std::move(*d);
  }
  // id -> token string over the vocab and the added tokens.
  int64_t max_id = -1;
  const Json& vocab = model["vocab"];
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    max_id = std::max<int64_t>(max_id, it->get<int64_t>());
  for (const auto& a : tj.value("added_tokens", Json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() >= (int64_t{1} << 24)) {
      return absl::InvalidArgumentError("added_tokens: entries need an id and a content");
    }
    AddedToken t;
    t.id = a["id"].get<int32_t>();
    t.content = a["content"].get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    t.normalized = a.value("normalized", !t.special);
    max_id = std::max<int64_t>(max_id, t.id);
    parts.added.push_back(std::move(t));
  }
  parts.id_to_token.assign(static_cast<size_t>(max_id + 1), "");
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    parts.id_to_token[it->get<size_t>()] = it.key();
  for (const AddedToken& t : parts.added) parts.id_to_token[static_cast<size_t>(t.id)] = t.content;

  {
    absl::Status s = ParsePostProcessor(tj.value("post_processor", Json()), &parts);
    if (!s.ok()) return Annotate(s, "post_processor");
  }
  parts.bos_id = ResolveId(parts, TokenContent(cfg, "bos_token"));
  int32_t eos = ResolveId(parts, TokenContent(cfg, "eos_token"));
  if (eos >= 0) parts.eos_ids.push_back(eos);
  const Json& gen_eos = gen.value("eos_token_id", Json());
  for (const auto& e : gen_eos.is_array() ? gen_eos : Json::array({gen_eos})) {
    if (e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= max_id &&
        std::find(parts.eos_ids.begin(), parts.eos_ids.end(), e.get<int32_t>()) ==
            parts.eos_ids.end()) {
      parts.eos_ids.push_back(e.get<int32_t>());
    }
  }
  // transformers' Llama-family fast tokenizers rebuild the post-processor from the config's
  // add_bos_token / add_eos_token (DeepSeek-V3 ships a ByteLevel post-processor yet gets BOS).
  std::string cls = cfg.value("tokenizer_class", "");
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  if (cls == "LlamaTokenizer" || cls == "CodeLlamaTokenizer" || cls == "GemmaTokenizer") {
    bool add_bos = cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()
                       ? cfg["add_bos_token"].get<bool>()
                       : !parts.prefix_ids.empty();
    bool add_eos = cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()
                       ? cfg["add_eos_token"].get<bool>()
                       : !parts.suffix_ids.empty();
    parts.prefix_ids.clear();
    parts.suffix_ids.clear();
    if (add_bos && parts.bos_id >= 0) parts.prefix_ids.push_back(parts.bos_id);
    if (add_eos && !parts.eos_ids.empty()) parts.suffix_ids.push_back(parts.eos_ids[0]);
  }
  const Json& tmpl = cfg.value("chat_template", Json());
  if (tmpl.is_string()) {
    parts.chat_template = tmpl.get<std::string>();
  } else if (tmpl.is_array()) {  // named templates: transformers uses "default"
    for (const auto& t : tmpl) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        parts.chat_template = t["template"].get<std::string>();
      }
    }
  }
  return parts;
}

// nlohmann::json throws on type mismatches (e.g. a null where a bool is read); a malformed
// file is an InvalidArgument, never an exception.
absl::StatusOr<PipelineParts> PartsFromJson(const Json& tj, const Json& cfg, const Json& gen) {
  try {
    return PartsFromJsonUnchecked(tj, cfg, gen);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer files: ", e.what()));
  }
}

absl::StatusOr<Json> ParseJsonText(std::string_view text, const std::string& what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  return j;
}

absl::StatusOr<Json> ReadOptionalJson(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Json::object();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseJsonText(text, path.string());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  ASSIGN_OR_RETURN(Json tj, ParseJsonText(tokenizer_json, "tokenizer.json"));
  Json cfg = Json::object();
  if (!tokenizer_config_json.empty()) {
    ASSIGN_OR_RETURN(cfg, ParseJsonText(tokenizer_config_json, "tokenizer_config.json"));
  }
  ASSIGN_OR_RETURN(PipelineParts parts, PartsFromJson(tj, cfg, Json::object()));
  return internal::MakePipelineTokenizer(std::move(parts));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::filesystem::path& path) {
  std::error_code ec;
  // A GGUF served in place (or a directory holding one): its own tokenizer.* metadata.
  ASSIGN_OR_RETURN(std::optional<std::filesystem::path> gguf, model::FindGgufModel(path));
  if (gguf) return LoadGgufTokenizer(*gguf);
  if (std::filesystem::is_regular_file(path, ec)) {
    if (path.filename() == "tokenizer.json") return LoadTokenizer(path.parent_path());
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path.string(), "' is neither a GGUF file nor a directory with tokenizer.json"));
  }
  const std::filesystem::path tj_path = path / "tokenizer.json";
  if (!std::filesystem::exists(tj_path, ec)) {
    // colibri-convert stores a GGUF model's tokenizer as tokenizer.gguf (tokenizer.* metadata).
    if (std::filesystem::exists(path / "tokenizer.gguf", ec))
      return LoadGgufTokenizer(path / "tokenizer.gguf");
    return absl::NotFoundError(
        absl::StrCat("no tokenizer.json or tokenizer.gguf in '", path.string(), "'"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(tj_path));
  auto tj = ParseJsonText(text, tj_path.string());
  if (!tj.ok()) return tj.status();
  ASSIGN_OR_RETURN(Json cfg, ReadOptionalJson(path / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(Json gen, ReadOptionalJson(path / "generation_config.json"));
  auto parts = PartsFromJson(*tj, cfg, gen);
  if (!parts.ok()) return Annotate(parts.status(), tj_path.string());
  auto tok = internal::MakePipelineTokenizer(std::move(*parts));
  if (!tok.ok()) return Annotate(tok.status(), tj_path.string());
  return tok;
}

}  // namespace colibri::tokenizer
