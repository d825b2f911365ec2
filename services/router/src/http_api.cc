#include "http_api.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "anthropic_request.h"
#include "client_watch.h"
#include "colibri/core/json.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/grammar/tool_call_grammar.h"
#include "colibri/rpc/status.h"
#include "colibri/tokenizer/chat_output.h"
#include "http_server.h"
#include "nlohmann/json.hpp"
#include "openai_request.h"
#include "request_json.h"
#include "response_store.h"
#include "responses_request.h"
#include "spdlog/spdlog.h"
#include "web_assets.h"

namespace colibri::router {
namespace {

using nlohmann::json;

// Text from a model can hold anything; the JSON we send is always valid UTF-8.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(prefix, NowSeconds(), "-", counter++);
}

// JSON bodies only: a web page can POST text/plain or a form to a local server without a CORS
// preflight, never application/json.
bool JsonContentType(const httplib::Request& req) {
  std::string ct = req.get_header_value("Content-Type");
  for (char& c : ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t semi = ct.find(';');
  if (semi != std::string::npos) ct.resize(semi);
  while (!ct.empty() && ct.back() == ' ') ct.pop_back();
  return ct == "application/json";
}

const char* FinishName(generation::FinishReason f) {
  return f == generation::FinishReason::kLength ? "length" : "stop";
}

json LogprobsJson(const tokenizer::Tokenizer& tok,
                  const std::vector<generation::SampledToken>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    json top = json::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"token", tok.Decode({id}, false)}, {"logprob", lp}});
    content.push_back(
        {{"token", tok.Decode({t.id}, false)}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// Anthropic clients send their key as x-api-key; either header is checked the same way.
std::string Credentials(const httplib::Request& req) {
  std::string authorization = req.get_header_value("Authorization");
  if (authorization.empty() && req.has_header("x-api-key"))
    authorization = "Bearer " + req.get_header_value("x-api-key");
  return authorization;
}

bool AnthropicPath(const std::string& path) {
  return path == "/v1/messages" || path == "/v1/messages/count_tokens";
}

// The web page's files by path ("/" is index.html); nullptr for any other path.
const EmbeddedFile* PageFile(const std::string& path) {
  const std::string_view name =
      path == "/" ? std::string_view("index.html") : std::string_view(path).substr(1);
  if (path.empty() || path[0] != '/') return nullptr;
  for (const auto& f : EmbeddedFiles()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const char* ContentType(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

// An error before routing, in the shape of the API the path belongs to.
std::string RouteErrorBody(const std::string& path, int http, const std::string& message,
                           const char* type, const char* code) {
  return AnthropicPath(path) ? rpc::AnthropicErrorBody(http, message)
                             : rpc::OpenAiErrorBody(http, message, type, code);
}

// parallel_tool_calls false (OpenAI) and disable_parallel_tool_use (Anthropic): the answer's
// first tool call only. `sent` counts the calls already passed on (a stream's earlier deltas)
// and grows by those kept.
void KeepFirstCall(bool parallel, size_t* sent, json* calls) {
  if (!parallel) {
    const size_t keep = *sent == 0 ? std::min<size_t>(calls->size(), 1) : 0;
    calls->erase(calls->begin() + static_cast<ptrdiff_t>(keep), calls->end());
  }
  *sent += calls->size();
}

const char* AnthropicStopReason(const TextResult& t) {
  if (t.finish == generation::FinishReason::kLength) return "max_tokens";
  return t.stop_string.empty() ? "end_turn" : "stop_sequence";
}

class Handler {
 public:
  Handler(RouterCore* core, RouterMetrics* metrics, const HttpOptions& options)
      : core_(core),
        metrics_(metrics),
        options_(options),
        format_(tokenizer::DetectChatOutputFormat(core->tokenizer().chat_template())),
        eos_ids_(core->tokenizer().eos_ids()) {}

  void Error(httplib::Response& res, const std::string& endpoint, const absl::Status& status,
             bool anthropic = false) {
    res.status = rpc::HttpStatus(status);
    res.set_content(anthropic ? rpc::AnthropicErrorBody(status) : rpc::OpenAiErrorBody(status),
                    "application/json");
    metrics_->CountRequest(endpoint, res.status);
  }

  // --strict-fields: InvalidArgument naming the fields the route does not know.
  absl::Status Strict(const std::vector<std::string>& unknown) const {
    if (!options_.strict_fields || unknown.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown field", unknown.size() > 1 ? "s " : " ", "'", absl::StrJoin(unknown, "', '"),
        "' (the server refuses fields it does not know: --strict-fields)"));
  }

  // Names the fields a request carried that change nothing here (x-colibri-ignored-fields), and
  // logs each name once per process (at most 256 names: a hostile client cannot grow the set).
  void ReportIgnored(httplib::Response& res, const std::vector<std::string>& ignored) {
    if (ignored.empty()) return;
    res.set_header("x-colibri-ignored-fields", absl::StrJoin(ignored, ", "));
    std::lock_guard<std::mutex> lock(warned_mu_);
    for (const auto& name : ignored) {
      if (warned_.size() >= 256 || !warned_.insert(name).second) continue;
      spdlog::warn("request field {} has no effect here and is ignored (x-colibri-ignored-fields)",
                   name);
    }
  }

  // Before routing: 401 in the API's shape for a request without a valid key.
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    auto who = auth::AuthorizeHttp(options_.access, req.path, Credentials(req));
    if (who.ok()) return true;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(RouteErrorBody(req.path, 401, std::string(who.status().message()),
                                   "invalid_request_error", "invalid_api_key"),
                    "application/json");
    metrics_->CountRequest("unauthenticated", 401);
    return false;
  }

  void Models(const httplib::Request& req, httplib::Response& res) {
    json data = json::array();
    for (const std::string& name : core_->served_names()) {
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "colibri"},
                      {"max_model_len", core_->context_length()}});
    }
    res.set_content(Dump(json{{"object", "list"}, {"data", data}}), "application/json");
    metrics_->CountRequest("models", 200);
  }

  // GET /stats: what the web page shows beside /metrics.
  void Stats(const httplib::Request&, httplib::Response& res) {
    json cells = json::array();
    int32_t layers = 0, experts = 0;
    for (const auto& c : core_->heat().GlobalCells()) {
      cells.push_back({c.layer, c.expert, c.heat});
      layers = std::max(layers, c.layer + 1);
      experts = std::max(experts, c.expert + 1);
    }
    json j = {{"model", core_->model_name()},
              {"served_names", core_->served_names()},
              {"context_length", core_->context_length()},
              {"heat", {{"layers", layers}, {"experts", experts}, {"cells", cells}}},
              {"node", nullptr}};
    if (options_.node_stats) j["node"] = json::parse(options_.node_stats(), nullptr, false);
    res.set_content(Dump(j), "application/json");
    metrics_->CountRequest("stats", 200);
  }

  void Completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat_completions" : "completions";
    std::vector<std::string> ignored, unknown;
    auto request = Prepare(req, ParseOpenAiRequest(req.body, chat, &ignored, &unknown));
    if (!request.ok()) return Error(res, endpoint, request.status());
    if (auto st = Strict(unknown); !st.ok()) return Error(res, endpoint, st);
    ReportIgnored(res, ignored);
    auto r = *request;
    const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = NowSeconds();
    const int client_fd = CurrentConnectionSocket();
    if (!r->stream) {
      ClientWatch watch(client_fd, r->params.cancel);
      return Blocking(res, endpoint, *r, id, created);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, r, id, created, endpoint, client_fd](size_t, httplib::DataSink& sink) {
          ClientWatch watch(client_fd, r->params.cancel);
          Stream(sink, endpoint, *r, id, created);
          return true;
        });
  }

  // GET /v1/models/{id}: one served name, or 404 naming the ones served.
  void Model(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
    if (auto st = core_->CheckModel(name); !st.ok() || name.empty()) {
      return Error(res, "model", st.ok() ? absl::NotFoundError("model name is empty") : st);
    }
    res.set_content(Dump({{"id", name},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "colibri"},
                          {"max_model_len", core_->context_length()}}),
                    "application/json");
    metrics_->CountRequest("model", 200);
  }

  // POST /tokenize {"content", "add_special" (false), "with_pieces" (false)} -> {"tokens"}, and
  // POST /detokenize {"tokens"} -> {"content"}: llama-server's shapes.
  void Tokenize(const httplib::Request& req, httplib::Response& res, bool detokenize) {
    const std::string endpoint = detokenize ? "detokenize" : "tokenize";
    auto body = ParseJson(req.body, "request body");
    if (!body.ok() || !body->is_object()) {
      return Error(res, endpoint, absl::InvalidArgumentError("request body must be a JSON object"));
    }
    const tokenizer::Tokenizer& tok = core_->tokenizer();
    if (detokenize) {
      auto t = body->find("tokens");
      if (t == body->end() || !t->is_array())
        return Error(res, endpoint, FieldError("tokens", "must be a list of token ids"));
      std::vector<int32_t> ids;
      for (const auto& x : *t) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
            x.get<int64_t>() >= tok.vocab_size()) {
          return Error(res, endpoint,
                       FieldError("tokens", absl::StrCat("ids must be integers from 0 to ",
                                                         tok.vocab_size() - 1)));
        }
        ids.push_back(x.get<int32_t>());
      }
      res.set_content(Dump({{"content", tok.Decode(ids, /*skip_special=*/false)}}),
                      "application/json");
    } else {
      auto c = body->find("content");
      if (c == body->end() || !c->is_string())
        return Error(res, endpoint, FieldError("content", "must be a string"));
      bool add_special = false, with_pieces = false;
      if (auto st = ReadBool(*body, "add_special", &add_special); !st.ok())
        return Error(res, endpoint, st);
      if (auto st = ReadBool(*body, "with_pieces", &with_pieces); !st.ok())
        return Error(res, endpoint, st);
      auto ids = tok.Encode(c->get<std::string>(), add_special);
      if (!ids.ok()) return Error(res, endpoint, ids.status());
      json tokens = json::array();
      // Each token's text as it reads in the sequence (a lone token's decode drops its leading
      // space; bytes of an unfinished character come with the token that completes it).
      tokenizer::StreamDecoder pieces(&tok, /*skip_special=*/false);
      for (int32_t id : *ids) {
        if (with_pieces) {
          tokens.push_back({{"id", id}, {"piece", pieces.Push(id)}});
        } else {
          tokens.push_back(id);
        }
      }
      res.set_content(Dump({{"tokens", tokens}}), "application/json");
    }
    metrics_->CountRequest(endpoint, 200);
  }

  // POST /v1/messages/count_tokens: the Messages request's prompt as the model's template renders
  // it, counted ({"input_tokens"}); max_tokens is not needed.
  void CountTokens(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "count_tokens";
    auto body = ParseJson(req.body, "request body");
    if (body.ok() && body->is_object() && !body->contains("max_tokens")) (*body)["max_tokens"] = 1;
    auto request = Prepare(req, body.ok() ? ParseAnthropicRequest(body->dump()) : body.status());
    if (!request.ok()) return Error(res, endpoint, request.status(), /*anthropic=*/true);
    res.set_content(Dump({{"input_tokens", (*request)->params.prompt.size()}}), "application/json");
    metrics_->CountRequest(endpoint, 200);
  }

  // The owner a key-scoped resource (a stored response) belongs to: the key's name, "" without
  // keys.
  std::string Owner(const httplib::Request& req) const {
    auto who = auth::AuthorizeHttp(options_.access, req.path, Credentials(req));
    return who.ok() ? *who : std::string();
  }

  // POST /v1/responses: the Responses API (the Codex CLI's wire) over the same run: the
  // conversation is the instructions, the previous stored response's turns and the new input.
  void Responses(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "responses";
    std::vector<std::string> ignored, unknown;
    auto parsed = ParseResponsesRequest(req.body, &ignored, &unknown);
    if (parsed.ok()) {
      if (auto st = Strict(unknown); !st.ok()) parsed = st;
    }
    if (!parsed.ok()) return Error(res, endpoint, parsed.status());
    auto rr = std::make_shared<ResponsesRequest>(*std::move(parsed));
    const std::string owner = Owner(req);
    std::vector<tokenizer::ChatMessage> history;  // what a stored response continues from
    if (!rr->previous_response_id.empty()) {
      auto previous = responses_.Get(rr->previous_response_id, owner);
      if (!previous.ok()) {
        return Error(res, endpoint,
                     absl::NotFoundError(
                         absl::StrCat("previous_response_id: ", previous.status().message())));
      }
      history = std::move(previous->conversation);
    }
    history.insert(history.end(), rr->chat.messages.begin(), rr->chat.messages.end());
    OpenAiRequest chat = rr->chat;
    chat.messages.clear();
    if (!rr->instructions.empty()) chat.messages.push_back({"system", rr->instructions});
    chat.messages.insert(chat.messages.end(), history.begin(), history.end());
    auto request = Prepare(req, std::move(chat));
    if (!request.ok()) return Error(res, endpoint, request.status());
    ReportIgnored(res, ignored);
    auto r = *request;
    const std::string id = NewId("resp_");
    const int64_t created = NowSeconds();
    const int client_fd = CurrentConnectionSocket();
    auto finish = [this, rr, id, created, owner, history](
                      const TextResult& result, const tokenizer::AssistantOutput& out) mutable {
      json response = ResponseObject(id, created, *rr, &result, OutputItems(id, *rr, out));
      if (rr->store) {
        tokenizer::ChatMessage turn{"assistant", out.content};
        turn.reasoning_content = out.reasoning_content;
        json calls = json::array();
        for (const auto& item : response["output"]) {
          if (item["type"] == "function_call") {
            calls.push_back(
                {{"id", item["call_id"]},
                 {"type", "function"},
                 {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
          }
        }
        if (!calls.empty()) turn.tool_calls_json = calls.dump();
        history.push_back(std::move(turn));
        responses_.Put(id, {owner, Dump(response), std::move(history)});
      }
      return response;
    };
    if (!r->stream) {
      ClientWatch watch(client_fd, r->params.cancel);
      std::vector<generation::SampledToken> tokens;
      auto result = RunBlocking(*r, &tokens);
      if (!result.ok()) return Error(res, endpoint, result.status());
      if (IsCancelled(r->params.cancel)) return ClientGone(res, endpoint);
      tokenizer::AssistantOutput out;
      if (format_ == tokenizer::ChatOutputFormat::kPlain) {
        out.content = result->text;
      } else {
        out = Split(*r, *result, tokens);
      }
      res.set_content(Dump(finish(*result, out)), "application/json");
      metrics_->CountRequest(endpoint, 200);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream",
                                     [this, r, rr, id, created, endpoint, client_fd, finish](
                                         size_t, httplib::DataSink& sink) mutable {
                                       ClientWatch watch(client_fd, r->params.cancel);
                                       StreamResponse(sink, endpoint, *r, *rr, id, created, finish);
                                       return true;
                                     });
  }

  // GET /v1/responses/{id} and DELETE /v1/responses/{id}: a stored response, the key's own.
  void StoredResponseRoute(const httplib::Request& req, httplib::Response& res, bool remove) {
    const std::string endpoint = remove ? "responses_delete" : "responses_get";
    const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
    if (remove) {
      if (auto st = responses_.Delete(id, Owner(req)); !st.ok()) return Error(res, endpoint, st);
      res.set_content(Dump({{"id", id}, {"object", "response.deleted"}, {"deleted", true}}),
                      "application/json");
    } else {
      auto stored = responses_.Get(id, Owner(req));
      if (!stored.ok()) return Error(res, endpoint, stored.status());
      res.set_content(stored->response_json, "application/json");
    }
    metrics_->CountRequest(endpoint, 200);
  }

  // The output items of an answer: reasoning, then the message (when it has text, or when
  // nothing else came), then the function calls (the first only without parallel_tool_calls).
  static json OutputItems(const std::string& id, const ResponsesRequest& rr,
                          const tokenizer::AssistantOutput& out) {
    json items = json::array();
    if (!out.reasoning_content.empty()) items.push_back(ReasoningItem(id, out.reasoning_content));
    if (!out.content.empty() || out.tool_calls.empty())
      items.push_back(MessageItem(id, out.content));
    json calls = out.tool_calls;
    size_t n = 0;
    KeepFirstCall(rr.parallel_tool_calls, &n, &calls);
    for (size_t i = 0; i < calls.size(); ++i) items.push_back(FunctionCallItem(id, i, calls[i]));
    return items;
  }
  static json ReasoningItem(const std::string& id, const std::string& text) {
    return {{"type", "reasoning"},
            {"id", "rs_" + id.substr(5)},
            {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})},
            {"encrypted_content", nullptr},
            {"status", "completed"}};
  }
  static json MessageItem(const std::string& id, const std::string& text) {
    return {{"type", "message"},
            {"id", "msg_" + id.substr(5)},
            {"status", "completed"},
            {"role", "assistant"},
            {"content", json::array({{{"type", "output_text"},
                                      {"text", text},
                                      {"annotations", json::array()},
                                      {"logprobs", json::array()}}})}};
  }
  static json FunctionCallItem(const std::string& id, size_t n, const json& call) {
    const json& fn = call.contains("function") ? call["function"] : json::object();
    const json args = fn.contains("arguments") ? fn["arguments"] : json("{}");
    const std::string call_id = call.value("id", "");
    return {{"type", "function_call"},
            {"id", absl::StrCat("fc_", id.substr(5), "_", n)},
            {"call_id", call_id.empty() ? absl::StrCat("call_", id.substr(5), "_", n) : call_id},
            {"name", fn.value("name", "")},
            {"arguments", args.is_string() ? args.get<std::string>() : args.dump()},
            {"status", "completed"}};
  }

  // The response object: `result` null while it is in progress.
  json ResponseObject(const std::string& id, int64_t created, const ResponsesRequest& rr,
                      const TextResult* result, json output) const {
    json r = {{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", "in_progress"},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", rr.instructions.empty() ? json(nullptr) : json(rr.instructions)},
              {"max_output_tokens",
               rr.max_output_tokens_given ? json(rr.chat.params.max_tokens) : json(nullptr)},
              {"model", core_->model_name()},
              {"output", std::move(output)},
              {"parallel_tool_calls", rr.parallel_tool_calls},
              {"previous_response_id",
               rr.previous_response_id.empty() ? json(nullptr) : json(rr.previous_response_id)},
              {"reasoning", rr.reasoning.is_null() ? json::object() : rr.reasoning},
              {"store", rr.store},
              {"temperature", rr.chat.params.sampling.temperature},
              {"text", {{"format", {{"type", "text"}}}}},
              {"tool_choice", rr.tool_choice},
              {"tools", rr.tools},
              {"top_p", rr.chat.params.sampling.top_p},
              {"metadata", rr.metadata.is_null() ? json::object() : rr.metadata},
              {"usage", nullptr}};
    if (result != nullptr) {
      const bool cut = result->finish == generation::FinishReason::kLength;
      r["status"] = cut ? "incomplete" : "completed";
      if (cut) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
      r["usage"] = {{"input_tokens", result->prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", result->cached_prompt_tokens}}},
                    {"output_tokens", result->completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", result->prompt_tokens + result->completion_tokens}};
    }
    return r;
  }

  // The Responses API's streaming events: response.created and .in_progress, then each output
  // item as the answer writes it (added, its deltas, done), then response.completed (or
  // .incomplete / .failed), every event with its sequence_number.
  void StreamResponse(
      httplib::DataSink& sink, const std::string& endpoint, const OpenAiRequest& r,
      const ResponsesRequest& rr, const std::string& id, int64_t created,
      const std::function<json(const TextResult&, const tokenizer::AssistantOutput&)>& finish) {
    int64_t seq = 0;
    auto event = [&](const char* name, json data) {
      data["type"] = name;
      data["sequence_number"] = seq++;
      std::string line = absl::StrCat("event: ", name, "\ndata: ", Dump(data), "\n\n");
      return sink.write(line.data(), line.size());
    };
    const json start = ResponseObject(id, created, rr, nullptr, json::array());
    bool ok = event("response.created", {{"response", start}}) &&
              event("response.in_progress", {{"response", start}});
    tokenizer::AssistantOutput all;  // the answer so far, for the done events
    int output_index = -1;
    std::string open_kind;  // "reasoning" | "message" | "" (function calls open and close at once)
    std::string open_text;
    size_t calls = 0;
    auto close_item = [&] {
      if (open_kind.empty()) return true;
      json item;
      bool good = true;
      if (open_kind == "message") {
        item = MessageItem(id, open_text);
        const json part = item["content"][0];
        good = event("response.output_text.done", {{"item_id", item["id"]},
                                                   {"output_index", output_index},
                                                   {"content_index", 0},
                                                   {"text", open_text},
                                                   {"logprobs", json::array()}}) &&
               event("response.content_part.done", {{"item_id", item["id"]},
                                                    {"output_index", output_index},
                                                    {"content_index", 0},
                                                    {"part", part}});
      } else {
        item = ReasoningItem(id, open_text);
        good = event("response.reasoning_text.done", {{"item_id", item["id"]},
                                                      {"output_index", output_index},
                                                      {"content_index", 0},
                                                      {"text", open_text}});
      }
      open_kind.clear();
      open_text.clear();
      return good &&
             event("response.output_item.done", {{"output_index", output_index}, {"item", item}});
    };
    auto add_text = [&](const std::string& kind, const std::string& text, bool open = false) {
      if (text.empty() && !open) return true;
      const bool message = kind == "message";
      if (open_kind != kind) {
        if (!close_item()) return false;
        open_kind = kind;
        ++output_index;
        json item = message ? MessageItem(id, "") : ReasoningItem(id, "");
        item["status"] = "in_progress";
        if (message) item["content"] = json::array();
        if (!event("response.output_item.added", {{"output_index", output_index}, {"item", item}}))
          return false;
        if (message &&
            !event("response.content_part.added",
                   {{"item_id", item["id"]},
                    {"output_index", output_index},
                    {"content_index", 0},
                    {"part",
                     {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}}))
          return false;
      }
      if (text.empty()) return true;
      open_text += text;
      const std::string item_id = message ? "msg_" + id.substr(5) : "rs_" + id.substr(5);
      return event(message ? "response.output_text.delta" : "response.reasoning_text.delta",
                   {{"item_id", item_id},
                    {"output_index", output_index},
                    {"content_index", 0},
                    {"delta", text},
                    {"logprobs", json::array()}});
    };
    auto add_parsed = [&](const tokenizer::AssistantStream::Delta& d) {
      all.reasoning_content += d.reasoning_content;
      all.content += d.content;
      bool good = add_text("reasoning", d.reasoning_content) && add_text("message", d.content);
      for (const auto& call : d.tool_calls) all.tool_calls.push_back(call);
      json kept = d.tool_calls;
      const size_t first = calls;
      KeepFirstCall(rr.parallel_tool_calls, &calls, &kept);
      for (size_t i = 0; i < kept.size(); ++i) {
        json item = FunctionCallItem(id, first + i, kept[i]);
        const std::string args = item["arguments"];
        json added = item;
        added["arguments"] = "";
        added["status"] = "in_progress";
        good =
            good && close_item() && (++output_index, true) &&
            event("response.output_item.added",
                  {{"output_index", output_index}, {"item", added}}) &&
            event("response.function_call_arguments.delta",
                  {{"item_id", item["id"]}, {"output_index", output_index}, {"delta", args}}) &&
            event("response.function_call_arguments.done",
                  {{"item_id", item["id"]}, {"output_index", output_index}, {"arguments", args}}) &&
            event("response.output_item.done", {{"output_index", output_index}, {"item", item}});
      }
      return good;
    };
    const bool split = format_ != tokenizer::ChatOutputFormat::kPlain;
    tokenizer::AssistantStream parser(format_, r.chat_options.tools_json);
    tokenizer::StreamDecoder special(&core_->tokenizer(), /*skip_special=*/false);
    Streamed out = Pump(sink, r, ok, [&](const Delta& d) {
      if (split) return add_parsed(parser.Push(FormatText(d, &special)));
      all.content += d.text;
      return add_text("message", d.text);
    });
    if (split && out.result.ok() && out.client_ok) {
      out.client_ok = add_parsed(
          parser.Finish(tokenizer::DecodesSpecialTokens(format_) ? special.Flush() : ""));
    }
    if (!out.result.ok()) {
      json failed = start;
      failed["status"] = "failed";
      failed["error"] = {{"code", "server_error"},
                         {"message", std::string(out.result.status().message())}};
      event("response.failed", {{"response", failed}});
      metrics_->CountRequest(endpoint, rpc::HttpStatus(out.result.status()));
    } else if (out.client_ok) {
      if (output_index < 0) add_text("message", "", /*open=*/true);  // an empty answer: one message
      close_item();
      const json done = finish(*out.result, all);
      event(done["status"] == "completed" ? "response.completed" : "response.incomplete",
            {{"response", done}});
      metrics_->CountRequest(endpoint, 200);
    } else {
      metrics_->CountRequest(endpoint, 499);
    }
    sink.done();
  }

  // POST /v1/messages: Anthropic's Messages API over the same request and run.
  void Messages(const httplib::Request& req, httplib::Response& res) {
    const std::string endpoint = "messages";
    std::vector<std::string> ignored, unknown;
    auto request = Prepare(req, ParseAnthropicRequest(req.body, &ignored, &unknown));
    if (request.ok()) {
      if (auto st = Strict(unknown); !st.ok()) request = st;
    }
    if (!request.ok()) return Error(res, endpoint, request.status(), /*anthropic=*/true);
    ReportIgnored(res, ignored);
    auto r = *request;
    const std::string id = NewId("msg_");
    const int client_fd = CurrentConnectionSocket();
    if (!r->stream) {
      ClientWatch watch(client_fd, r->params.cancel);
      std::vector<generation::SampledToken> tokens;
      auto result = RunBlocking(*r, &tokens);
      if (!result.ok()) return Error(res, endpoint, result.status(), true);
      if (IsCancelled(r->params.cancel)) return ClientGone(res, endpoint);
      json body = AnthropicMessage(id, *result);
      if (format_ == tokenizer::ChatOutputFormat::kPlain) {
        body["content"] = json::array({{{"type", "text"}, {"text", result->text}}});
      } else {
        tokenizer::AssistantOutput out = Split(*r, *result, tokens);
        size_t sent = 0;
        KeepFirstCall(r->parallel_tool_calls, &sent, &out.tool_calls);
        body["content"] = AnthropicContent(out);
        if (!out.tool_calls.empty()) body["stop_reason"] = "tool_use";
      }
      res.set_content(Dump(body), "application/json");
      metrics_->CountRequest(endpoint, 200);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, r, id, endpoint, client_fd](size_t, httplib::DataSink& sink) {
          ClientWatch watch(client_fd, r->params.cancel);
          StreamMessages(sink, endpoint, *r, id);
          return true;
        });
  }

 private:
  // What every generating route does after parsing: a cancel flag for the client's leaving (a
  // ClientWatch on its connection sets it, so a queued or prefilling request stops too), the
  // model name, the prompt, the key-scoped session and the context check.
  absl::StatusOr<std::shared_ptr<OpenAiRequest>> Prepare(const httplib::Request& req,
                                                         absl::StatusOr<OpenAiRequest> parsed) {
    if (!parsed.ok()) return parsed.status();
    if (!parsed->forced_tool.empty()) {
      // A forced call: one call in the model's own format, its arguments per the tool's schema.
      if (!parsed->params.grammar.empty())
        return FieldError("tool_choice",
                          "a forced tool call cannot be combined with a "
                          "structured response format or a grammar");
      absl::StatusOr<std::string> g = grammar::ToolCallGrammar(
          format_, parsed->chat_options.tools_json,
          parsed->forced_tool == "*" ? std::string() : parsed->forced_tool);
      if (!g.ok()) return FieldError("tool_choice", std::string(g.status().message()));
      parsed->params.grammar = *std::move(g);
    }
    parsed->params.cancel = std::make_shared<CancelFlag>();
    RETURN_IF_ERROR(core_->CheckModel(parsed->model));
    absl::StatusOr<std::vector<int32_t>> ids =
        parsed->chat                  ? core_->EncodeChat(parsed->messages, parsed->chat_options)
        : !parsed->prompt_ids.empty() ? parsed->prompt_ids
                                      : core_->EncodeText(parsed->prompt);
    if (!ids.ok()) return ids.status();
    parsed->params.prompt = std::move(*ids);
    parsed->params.session_id = ScopedSessionId(Owner(req), parsed->params.session_id);
    if (parsed->chat && parsed->params.session_id.empty()) {
      parsed->params.affinity_key = ComputePool::ChatKey(parsed->messages);
    }
    if (static_cast<int64_t>(parsed->params.prompt.size()) >= core_->context_length()) {
      return absl::InvalidArgumentError(
          absl::StrCat("This model's maximum context length is ", core_->context_length(),
                       " tokens, but the prompt has ", parsed->params.prompt.size(), " tokens"));
    }
    return std::make_shared<OpenAiRequest>(std::move(*parsed));
  }

  void ClientGone(httplib::Response& res, const std::string& endpoint) {  // nobody reads an answer
    res.status = 499;
    metrics_->CountRequest(endpoint, 499);
  }

  // One streamed choice: `delta`'s text as content, or `parsed`'s fields when the answer is split
  // into content, reasoning and tool calls (AssistantStream).
  json Choice(const OpenAiRequest& r, const Delta* delta, const char* finish, bool first,
              const tokenizer::AssistantStream::Delta* parsed = nullptr) {
    json c = {{"index", 0},
              {"finish_reason", finish ? json(finish) : json(nullptr)},
              {"logprobs", nullptr}};
    if (r.chat) {
      json d = json::object();
      if (first) d["role"] = "assistant";
      if (parsed) {
        if (!parsed->content.empty()) d["content"] = parsed->content;
        if (!parsed->reasoning_content.empty()) d["reasoning_content"] = parsed->reasoning_content;
        if (!parsed->tool_calls.empty()) d["tool_calls"] = parsed->tool_calls;
      } else if (delta) {
        d["content"] = delta->text;
      }
      c["delta"] = d;
    } else {
      c["text"] = delta ? delta->text : "";
    }
    if (delta && r.params.sampling.logprobs && !delta->tokens.empty()) {
      c["logprobs"] = LogprobsJson(core_->tokenizer(), delta->tokens);
    }
    if (delta && r.return_token_ids) {
      json ids = json::array();
      for (const auto& t : delta->tokens) ids.push_back(t.id);
      c["token_ids"] = ids;
    }
    return c;
  }

  static json Usage(const TextResult& t) {
    return {{"prompt_tokens", t.prompt_tokens},
            {"completion_tokens", t.completion_tokens},
            {"total_tokens", t.prompt_tokens + t.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", t.cached_prompt_tokens}}}};
  }

  // A Messages API message without its content: id, model, stop reason and usage (Anthropic
  // counts cache reads apart from input_tokens).
  json AnthropicMessage(const std::string& id, const TextResult& t) {
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", core_->model_name()},
            {"stop_reason", AnthropicStopReason(t)},
            {"stop_sequence", t.stop_string.empty() ? json(nullptr) : json(t.stop_string)},
            {"usage",
             {{"input_tokens", t.prompt_tokens - t.cached_prompt_tokens},
              {"cache_read_input_tokens", t.cached_prompt_tokens},
              {"cache_creation_input_tokens", 0},
              {"output_tokens", t.completion_tokens}}}};
  }

  void Account(const TextResult& t) {
    metrics_->prompt_tokens->Increment(static_cast<double>(t.prompt_tokens));
    metrics_->completion_tokens->Increment(static_cast<double>(t.completion_tokens));
  }

  // The chat message of a whole completion: reasoning and tool calls split out of the text
  // for templates whose models write them inline (chat_output.h); a call sets finish_reason
  // "tool_calls". Harmony's markers are special tokens: its text is the tokens decoded with them.
  json AssistantMessage(const OpenAiRequest& r, const TextResult& result,
                        const std::vector<generation::SampledToken>& tokens, json* choice) const {
    if (format_ == tokenizer::ChatOutputFormat::kPlain)
      return {{"role", "assistant"}, {"content", result.text}};
    tokenizer::AssistantOutput out = Split(r, result, tokens);
    size_t sent = 0;
    KeepFirstCall(r.parallel_tool_calls, &sent, &out.tool_calls);
    json message = {{"role", "assistant"}, {"content", out.content}};
    if (!out.reasoning_content.empty()) message["reasoning_content"] = out.reasoning_content;
    if (!out.tool_calls.empty()) {
      if (out.content.empty()) message["content"] = nullptr;
      message["tool_calls"] = std::move(out.tool_calls);
      (*choice)["finish_reason"] = "tool_calls";
    }
    return message;
  }

  // A whole answer split into content, reasoning and tool calls by the template's format
  // (harmony's text is the tokens decoded with their special tokens).
  tokenizer::AssistantOutput Split(const OpenAiRequest& r, const TextResult& result,
                                   const std::vector<generation::SampledToken>& tokens) const {
    std::string text = result.text;
    if (tokenizer::DecodesSpecialTokens(format_)) {
      std::vector<int32_t> ids;
      for (const auto& t : tokens) {
        if (Parsed(t.id)) ids.push_back(t.id);
      }
      text = core_->tokenizer().Decode(ids, /*skip_special=*/false);
    }
    return tokenizer::ParseAssistantOutput(text, format_, r.chat_options.tools_json);
  }

  // The text a stream delta adds to what its format parses: harmony's from the tokens, decoded
  // with their special tokens by `special`.
  std::string FormatText(const Delta& d, tokenizer::StreamDecoder* special) const {
    if (!tokenizer::DecodesSpecialTokens(format_)) return d.text;
    std::string raw;
    for (const auto& t : d.tokens) {
      if (Parsed(t.id)) raw += special->Push(t.id);
    }
    return raw;
  }

  // Whether a token decoded with its special tokens reaches the parser: the end-of-turn token
  // does only for harmony (its <|call|> / <|return|> say how the message ended).
  bool Parsed(int32_t id) const {
    if (format_ == tokenizer::ChatOutputFormat::kHarmony) return true;
    const std::vector<int32_t>& eos = eos_ids_;
    return std::find(eos.begin(), eos.end(), id) == eos.end();
  }

  // Messages API content blocks of a split answer: thinking, then text, then tool_use (a text
  // block only when there is text or nothing else).
  static json AnthropicContent(const tokenizer::AssistantOutput& out) {
    json blocks = json::array();
    if (!out.reasoning_content.empty()) {
      blocks.push_back(
          {{"type", "thinking"}, {"thinking", out.reasoning_content}, {"signature", ""}});
    }
    if (!out.content.empty() || (blocks.empty() && out.tool_calls.empty())) {
      blocks.push_back({{"type", "text"}, {"text", out.content}});
    }
    for (const auto& call : out.tool_calls) blocks.push_back(ToolUseBlock(call));
    return blocks;
  }

  // An OpenAI tool call as a tool_use block: its arguments as the input object (arguments that
  // are not a JSON object are kept as {"arguments": "..."}).
  static json ToolUseBlock(const json& call) {
    const std::string args = call["function"].value("arguments", "");
    auto parsed = ParseJson(args, "tool call arguments");
    json input =
        parsed.ok() && parsed->is_object() ? std::move(*parsed) : json{{"arguments", args}};
    return {{"type", "tool_use"},
            {"id", call.value("id", "")},
            {"name", call["function"].value("name", "")},
            {"input", std::move(input)}};
  }

  // Runs a request to its end; `tokens` (optional) collects what was sampled. Counts tokens and
  // time on success.
  absl::StatusOr<TextResult> RunBlocking(const OpenAiRequest& r,
                                         std::vector<generation::SampledToken>* tokens) {
    const auto t0 = std::chrono::steady_clock::now();
    metrics_->active_requests->Increment();
    auto result = core_->Run(r.params, [&](const Delta& d) {
      if (tokens) tokens->insert(tokens->end(), d.tokens.begin(), d.tokens.end());
      return true;
    });
    metrics_->active_requests->Decrement();
    if (result.ok() && !IsCancelled(r.params.cancel)) {
      Account(*result);
      metrics_->request_seconds->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return result;
  }

  void Blocking(httplib::Response& res, const std::string& endpoint, const OpenAiRequest& r,
                const std::string& id, int64_t created) {
    std::vector<generation::SampledToken> tokens;
    auto result = RunBlocking(r, &tokens);
    if (!result.ok()) return Error(res, endpoint, result.status());
    if (IsCancelled(r.params.cancel)) return ClientGone(res, endpoint);
    json choice = {
        {"index", 0}, {"finish_reason", FinishName(result->finish)}, {"logprobs", nullptr}};
    if (r.chat) {
      choice["message"] = AssistantMessage(r, *result, tokens, &choice);
    } else {
      choice["text"] = result->text;
    }
    if (r.params.sampling.logprobs) choice["logprobs"] = LogprobsJson(core_->tokenizer(), tokens);
    if (r.return_token_ids) {
      json ids = json::array();
      for (const auto& t : tokens) ids.push_back(t.id);
      choice["token_ids"] = ids;
    }
    json body = {{"id", id},
                 {"object", r.chat ? "chat.completion" : "text_completion"},
                 {"created", created},
                 {"model", core_->model_name()},
                 {"choices", json::array({choice})},
                 {"usage", Usage(*result)}};
    res.set_content(Dump(body), "application/json");
    metrics_->CountRequest(endpoint, 200);
  }

  struct Streamed {
    absl::StatusOr<TextResult> result = absl::UnknownError("not run");
    bool client_ok = true;  // every write reached the client
  };

  // Runs a streaming request: generation on its own thread, this thread writing each delta
  // (write_delta false: the client is gone, which cancels the request). While nothing comes (a
  // long prefill, a queue wait) it sends SSE comments, which keep proxies from timing the
  // connection out and notice a client that went away. Counts the request's tokens and time.
  Streamed Pump(httplib::DataSink& sink, const OpenAiRequest& r, bool client_ok,
                const std::function<bool(const Delta&)>& write_delta) {
    const auto t0 = std::chrono::steady_clock::now();
    metrics_->active_requests->Increment();
    struct Channel {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<Delta> deltas;
      bool done = false;
      absl::StatusOr<TextResult> result = absl::UnknownError("not run");
    } ch;
    const CancelToken& gone = r.params.cancel;  // set by the ClientWatch, or here on a failed write
    std::thread worker([&] {
      auto res = core_->Run(r.params, [&](const Delta& d) {
        if (IsCancelled(gone)) return false;
        std::lock_guard<std::mutex> lock(ch.mu);
        ch.deltas.push_back(d);
        ch.cv.notify_one();
        return true;
      });
      std::lock_guard<std::mutex> lock(ch.mu);
      ch.result = std::move(res);
      ch.done = true;
      ch.cv.notify_one();
    });
    const auto keepalive = std::chrono::milliseconds(options_.sse_keepalive_ms);
    bool first = true;
    std::unique_lock<std::mutex> lock(ch.mu);
    for (;;) {
      const bool ready =
          ch.cv.wait_for(lock, keepalive, [&] { return !ch.deltas.empty() || ch.done; });
      if (!ready) {
        lock.unlock();
        static const std::string kComment = ": keep-alive\n\n";
        if (client_ok && !sink.write(kComment.data(), kComment.size())) client_ok = false;
        if (!client_ok) gone->Cancel();
        lock.lock();
        continue;
      }
      std::deque<Delta> batch;
      batch.swap(ch.deltas);
      const bool done = ch.done;
      lock.unlock();
      for (const Delta& d : batch) {
        if (first) {
          metrics_->time_to_first_token_seconds->Observe(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          first = false;
        }
        if (client_ok) client_ok = write_delta(d);
      }
      if (!client_ok || IsCancelled(gone)) {
        client_ok = false;
        gone->Cancel();
      }
      lock.lock();
      if (done && ch.deltas.empty()) break;
    }
    lock.unlock();
    worker.join();
    metrics_->active_requests->Decrement();
    if (ch.result.ok() && client_ok) Account(*ch.result);
    metrics_->request_seconds->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return {std::move(ch.result), client_ok};
  }

  void Stream(httplib::DataSink& sink, const std::string& endpoint, const OpenAiRequest& r,
              const std::string& id, int64_t created) {
    const char* object = r.chat ? "chat.completion.chunk" : "text_completion";
    auto send = [&](const json& chunk) {
      std::string line = absl::StrCat("data: ", Dump(chunk), "\n\n");
      return sink.write(line.data(), line.size());
    };
    auto chunk = [&](json choices) {
      return json{{"id", id},
                  {"object", object},
                  {"created", created},
                  {"model", core_->model_name()},
                  {"choices", std::move(choices)}};
    };
    bool client_ok = true;
    if (r.chat) client_ok = send(chunk(json::array({Choice(r, nullptr, nullptr, true)})));
    // Chat formats with reasoning or tool calls inline: each delta's text goes through the
    // stream splitter (harmony's from the tokens decoded with their special tokens).
    const bool split = r.chat && format_ != tokenizer::ChatOutputFormat::kPlain;
    tokenizer::AssistantStream parser(format_, r.chat_options.tools_json);
    tokenizer::StreamDecoder special(&core_->tokenizer(), /*skip_special=*/false);
    const bool wants_tokens = r.params.sampling.logprobs || r.return_token_ids;
    size_t calls = 0;  // tool calls sent (parallel_tool_calls false: the first only)
    auto first_call_only = [&](tokenizer::AssistantStream::Delta parsed) {
      KeepFirstCall(r.parallel_tool_calls, &calls, &parsed.tool_calls);
      return parsed;
    };
    Streamed out = Pump(sink, r, client_ok, [&](const Delta& d) {
      if (!split) return send(chunk(json::array({Choice(r, &d, nullptr, false)})));
      const tokenizer::AssistantStream::Delta parsed =
          first_call_only(parser.Push(FormatText(d, &special)));
      if (parsed.empty() && !(wants_tokens && !d.tokens.empty())) return true;
      return send(chunk(json::array({Choice(r, &d, nullptr, false, &parsed)})));
    });
    const char* finish_override = nullptr;
    if (split && out.result.ok() && out.client_ok) {
      const tokenizer::AssistantStream::Delta rest = first_call_only(parser.Finish(
          tokenizer::DecodesSpecialTokens(format_) ? special.Flush() : std::string()));
      if (!rest.empty())
        out.client_ok = send(chunk(json::array({Choice(r, nullptr, nullptr, false, &rest)})));
      if (parser.tool_calls() > 0) finish_override = "tool_calls";
    }
    if (!out.result.ok()) {
      // Headers are gone already: report the error in-band, in OpenAI's error shape.
      std::string line = absl::StrCat("data: ", rpc::OpenAiErrorBody(out.result.status()), "\n\n");
      sink.write(line.data(), line.size());
      metrics_->CountRequest(endpoint, rpc::HttpStatus(out.result.status()));
    } else if (out.client_ok) {
      send(chunk(json::array(
          {Choice(r, nullptr, finish_override ? finish_override : FinishName(out.result->finish),
                  false)})));
      if (r.include_usage) {
        json u = chunk(json::array());
        u["usage"] = Usage(*out.result);
        send(u);
      }
      metrics_->CountRequest(endpoint, 200);
    } else {
      metrics_->CountRequest(endpoint, 499);
    }
    static const std::string kDone = "data: [DONE]\n\n";
    if (out.client_ok) sink.write(kDone.data(), kDone.size());
    sink.done();
  }

  // The Messages API's event stream: message_start, content blocks (content_block_start, their
  // text_delta / thinking_delta / input_json_delta events, content_block_stop), message_delta
  // with the stop reason and usage, message_stop; an error event in Anthropic's shape if the run
  // fails.
  void StreamMessages(httplib::DataSink& sink, const std::string& endpoint, const OpenAiRequest& r,
                      const std::string& id) {
    auto event = [&](const char* name, const json& data) {
      std::string line = absl::StrCat("event: ", name, "\ndata: ", Dump(data), "\n\n");
      return sink.write(line.data(), line.size());
    };
    TextResult start;
    start.prompt_tokens = static_cast<int64_t>(r.params.prompt.size());
    json message = AnthropicMessage(id, start);
    message["content"] = json::array();
    message["stop_reason"] = nullptr;
    message["stop_sequence"] = nullptr;
    // Content blocks open as the answer needs them: one text block for plain models; thinking,
    // text and tool_use blocks, in the order the answer writes them, for split formats.
    int index = -1;
    std::string open_kind;  // the type of the open block, "" when none
    auto close_block = [&] {
      if (open_kind.empty()) return true;
      open_kind.clear();
      return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
    };
    auto open_block = [&](const json& block) {
      if (!close_block()) return false;
      open_kind = block["type"].get<std::string>();
      return event("content_block_start",
                   {{"type", "content_block_start"}, {"index", ++index}, {"content_block", block}});
    };
    auto add_text = [&](const std::string& kind, const std::string& text) {
      if (text.empty()) return true;
      const bool thinking = kind == "thinking";
      if (open_kind != kind &&
          !open_block(thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                               : json{{"type", "text"}, {"text", ""}})) {
        return false;
      }
      const json delta = thinking ? json{{"type", "thinking_delta"}, {"thinking", text}}
                                  : json{{"type", "text_delta"}, {"text", text}};
      return event("content_block_delta",
                   {{"type", "content_block_delta"}, {"index", index}, {"delta", delta}});
    };
    size_t tool_uses = 0;
    auto add_parsed = [&](const tokenizer::AssistantStream::Delta& d) {
      bool ok = add_text("thinking", d.reasoning_content) && add_text("text", d.content);
      json calls = d.tool_calls;
      KeepFirstCall(r.parallel_tool_calls, &tool_uses, &calls);
      for (const auto& call : calls) {
        json block = ToolUseBlock(call);
        const std::string input = block["input"].dump();
        block["input"] = json::object();
        ok = ok && open_block(block) &&
             event("content_block_delta",
                   {{"type", "content_block_delta"},
                    {"index", index},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", input}}}}) &&
             close_block();
      }
      return ok;
    };
    const bool split = format_ != tokenizer::ChatOutputFormat::kPlain;
    tokenizer::AssistantStream parser(format_, r.chat_options.tools_json);
    tokenizer::StreamDecoder special(&core_->tokenizer(), /*skip_special=*/false);
    bool client_ok = event("message_start", {{"type", "message_start"}, {"message", message}}) &&
                     (split || open_block({{"type", "text"}, {"text", ""}})) &&
                     event("ping", {{"type", "ping"}});
    Streamed out = Pump(sink, r, client_ok, [&](const Delta& d) {
      if (split) return add_parsed(parser.Push(FormatText(d, &special)));
      return add_text("text", d.text);
    });
    if (split && out.result.ok() && out.client_ok) {
      out.client_ok = add_parsed(
          parser.Finish(tokenizer::DecodesSpecialTokens(format_) ? special.Flush() : ""));
      if (out.client_ok && index < 0) out.client_ok = open_block({{"type", "text"}, {"text", ""}});
    }
    if (!out.result.ok()) {
      std::string line = absl::StrCat(
          "event: error\ndata: ", rpc::AnthropicErrorBody(out.result.status()), "\n\n");
      sink.write(line.data(), line.size());
      metrics_->CountRequest(endpoint, rpc::HttpStatus(out.result.status()));
    } else if (out.client_ok) {
      const TextResult& t = *out.result;
      close_block();
      event("message_delta",
            {{"type", "message_delta"},
             {"delta",
              {{"stop_reason", tool_uses > 0 ? "tool_use" : AnthropicStopReason(t)},
               {"stop_sequence", t.stop_string.empty() ? json(nullptr) : json(t.stop_string)}}},
             // The prompt's split between KV reused and prefilled is known only once the
             // request ran: message_start counted it all as input; these are the final figures
             // (the SDKs take message_delta's usage over message_start's).
             {"usage",
              {{"input_tokens", t.prompt_tokens - t.cached_prompt_tokens},
               {"cache_read_input_tokens", t.cached_prompt_tokens},
               {"cache_creation_input_tokens", 0},
               {"output_tokens", t.completion_tokens}}}});
      event("message_stop", {{"type", "message_stop"}});
      metrics_->CountRequest(endpoint, 200);
    } else {
      metrics_->CountRequest(endpoint, 499);
    }
    sink.done();
  }

  RouterCore* core_;
  RouterMetrics* metrics_;
  HttpOptions options_;
  std::mutex warned_mu_;
  std::set<std::string> warned_;  // ignored field names logged already
  // Responses kept for previous_response_id and GET / DELETE: 1024 at most, 64 MiB at most.
  ResponseStore responses_{1024, 64ull << 20};
  tokenizer::ChatOutputFormat format_;  // of the model's chat template
  std::vector<int32_t> eos_ids_;        // the model's end-of-turn tokens
};

}  // namespace

namespace {

// "localhost:8080" -> "localhost", "[::1]:80" -> "::1"; lower case.
std::string HostName(std::string host) {
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!host.empty() && host[0] == '[') {
    const size_t close = host.find(']');
    return close == std::string::npos ? host : host.substr(1, close - 1);
  }
  const size_t colon = host.find(':');
  if (colon != std::string::npos && host.find(':', colon + 1) == std::string::npos)
    host.resize(colon);
  return host;
}

// localhost (and *.localhost, which resolvers keep on loopback), ::1, and 127.x.y.z written as
// an address: "127.evil.example" is a name an attacker can point anywhere.
bool IsLoopbackName(const std::string& name) {
  if (name == "localhost" || name == "::1" || name.ends_with(".localhost")) return true;
  if (name.rfind("127.", 0) != 0) return false;
  return name.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

bool HostAllowed(const HttpOptions& o, const std::string& host_header) {
  const std::string name = HostName(host_header);
  for (const auto& a : o.allowed_hosts) {
    if (a == "*" || HostName(a) == name) return true;
  }
  if (!o.allowed_hosts.empty()) return false;
  return !IsLoopbackName(HostName(o.host)) || IsLoopbackName(name);
}

void AddHttpFlags(CLI::App* app, HttpOptions* o) {
  app->add_option("--host", o->host, "HTTP bind address (0.0.0.0: every interface)")
      ->capture_default_str();
  app->add_option("--port", o->port, "HTTP port (0 picks one)")->capture_default_str();
  app->add_option("--http-threads", o->threads, "HTTP worker threads")->capture_default_str();
  app->add_option("--sse-keepalive-ms", o->sse_keepalive_ms,
                  "SSE keep-alive comment interval while a stream is silent")
      ->capture_default_str();
  app->add_option("--allowed-hosts", o->allowed_hosts,
                  "Host header names accepted (comma-separated; '*': any). Default: loopback names "
                  "only when "
                  "bound to loopback (against DNS rebinding), any name otherwise")
      ->delimiter(',');
  app->add_option_function<std::string>(
         "--max-request-bytes",
         [o](const std::string& text) {
           auto bytes = ParseSize(text);
           if (!bytes.ok() || *bytes == 0)
             throw CLI::ValidationError("--max-request-bytes", "expects a size like 8M");
           o->max_request_bytes = static_cast<size_t>(*bytes);
         },
         "Largest request body accepted (413 above it)")
      ->default_str("8M");
  app->add_flag("--strict-fields", o->strict_fields,
                "Refuse request fields the API route does not know (400 naming them) instead of "
                "ignoring them with a warning");
  AddHttpLimitFlags(app, &o->limits);
}

void AddServedNameFlag(CLI::App* app, std::vector<std::string>* names) {
  app->add_option("--served-model-name", *names,
                  "Model names clients may use (the first is the one responses carry; /v1/models "
                  "lists all). "
                  "Default: the model's own name")
      ->delimiter(',');
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(RouterCore* core, RouterMetrics* metrics,
                                                        const HttpOptions& options) {
  auto api = std::unique_ptr<HttpApi>(new HttpApi());
  api->server_ =
      MakeBoundedHttpServer(options.threads, options.limits);  // queue, deadlines, /health
  auto handler = std::make_shared<Handler>(core, metrics, options);
  auto& s = *api->server_;
  s.set_payload_max_length(options.max_request_bytes);
  // Before any route: the key check, the Host check (DNS rebinding; /health stays open to
  // probes) and JSON-only POST bodies (no form or text/plain request from a web page). A request
  // refused here has not had its body read (httplib reads it only for a route), so the connection
  // is closed after the answer: kept alive, the unread body would be parsed as the next request
  // (a keep-alive client, e.g. Node's shared fetch pool, then got a bare 400).
  auto checks = [handler, options](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/health" && !HostAllowed(options, q.get_header_value("Host"))) {
      r.status = 403;
      r.set_content(RouteErrorBody(q.path, 403,
                                   absl::StrCat("Host '", q.get_header_value("Host"),
                                                "' is not allowed (see --allowed-hosts)"),
                                   "invalid_request_error", "host_not_allowed"),
                    "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool page = q.method == "GET" && PageFile(q.path) != nullptr;  // static, no data: open
    if (!page && !handler->Authorized(q, r)) return httplib::Server::HandlerResponse::Handled;
    if (q.method == "POST" && !JsonContentType(q)) {
      r.status = 415;
      r.set_content(RouteErrorBody(q.path, 415, "Content-Type must be application/json",
                                   "invalid_request_error", "unsupported_media_type"),
                    "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  };
  s.set_pre_routing_handler([checks](const httplib::Request& q, httplib::Response& r) {
    const auto result = checks(q, r);
    if (result == httplib::Server::HandlerResponse::Handled) r.set_header("Connection", "close");
    return result;
  });
  s.Post("/v1/chat/completions", [handler](const httplib::Request& q, httplib::Response& r) {
    handler->Completions(q, r, true);
  });
  s.Post("/v1/completions", [handler](const httplib::Request& q, httplib::Response& r) {
    handler->Completions(q, r, false);
  });
  s.Post("/v1/messages/count_tokens", [handler](const httplib::Request& q, httplib::Response& r) {
    handler->CountTokens(q, r);
  });
  s.Post("/tokenize", [handler](const httplib::Request& q, httplib::Response& r) {
    handler->Tokenize(q, r, /*detokenize=*/false);
  });
  s.Post("/detokenize", [handler](const httplib::Request& q, httplib::Response& r) {
    handler->Tokenize(q, r, /*detokenize=*/true);
  });
  s.Get(R"(/v1/models/([^/]+))",
        [handler](const httplib::Request& q, httplib::Response& r) { handler->Model(q, r); });
  s.Post("/v1/responses",
         [handler](const httplib::Request& q, httplib::Response& r) { handler->Responses(q, r); });
  s.Get(R"(/v1/responses/([A-Za-z0-9_\-]+))",
        [handler](const httplib::Request& q, httplib::Response& r) {
          handler->StoredResponseRoute(q, r, /*remove=*/false);
        });
  s.Delete(R"(/v1/responses/([A-Za-z0-9_\-]+))",
           [handler](const httplib::Request& q, httplib::Response& r) {
             handler->StoredResponseRoute(q, r, /*remove=*/true);
           });
  s.Post("/v1/messages",
         [handler](const httplib::Request& q, httplib::Response& r) { handler->Messages(q, r); });
  s.Get("/v1/models",
        [handler](const httplib::Request& q, httplib::Response& r) { handler->Models(q, r); });
  s.Get("/stats",
        [handler](const httplib::Request& q, httplib::Response& r) { handler->Stats(q, r); });
  for (const auto& f : EmbeddedFiles()) {
    auto serve = [&f](const httplib::Request&, httplib::Response& r) {
      // Only our own files run in the page, and no other site may frame it.
      r.set_header(
          "Content-Security-Policy",
          "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'");
      r.set_header("X-Content-Type-Options", "nosniff");
      r.set_header("X-Frame-Options", "DENY");
      r.set_header("Cache-Control", "no-cache");
      r.set_content(std::string(f.bytes), ContentType(f.name));
    };
    s.Get(absl::StrCat("/", std::string(f.name)), serve);
    if (f.name == "index.html") s.Get("/", serve);
  }
  s.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& r) {
    if (metrics->before_scrape) metrics->before_scrape();
    r.set_content(metrics::Serialize(*metrics->registry), "text/plain; version=0.0.4");
  });
  metrics::AddJsonRoutes(s, options.extra_routes);  // /admin/... and /health
  s.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (r.body.empty()) {
      r.set_content(
          RouteErrorBody(q.path, r.status, absl::StrCat("HTTP ", r.status), "invalid_request_error",
                         r.status == 404 ? "not_found" : "error"),
          "application/json");
    }
  });
  if (options.port == 0) {
    api->port_ = s.bind_to_any_port(options.host);
    if (api->port_ <= 0)
      return absl::UnavailableError(absl::StrCat("http: cannot bind ", options.host));
  } else {
    if (!s.bind_to_port(options.host, options.port)) {
      return absl::UnavailableError(
          absl::StrCat("http: cannot bind ", options.host, ":", options.port, " (in use?)"));
    }
    api->port_ = options.port;
  }
  api->thread_ = std::thread([srv = api->server_.get()] { srv->listen_after_bind(); });
  return api;
}

HttpApi::~HttpApi() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace colibri::router
