#include "http_api.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/rpc/status.h"
#include "colibri/tokenizer/harmony.h"
#include "nlohmann/json.hpp"
#include "client_watch.h"
#include "http_server.h"
#include "openai_request.h"

namespace colibri::router {
namespace {

using nlohmann::json;

// Text from a model can hold anything; the JSON we send is always valid UTF-8.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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

const char* FinishName(engine::FinishReason f) {
  return f == engine::FinishReason::kLength ? "length" : "stop";
}

json LogprobsJson(const tokenizer::Tokenizer& tok, const std::vector<engine::SampledToken>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    json top = json::array();
    for (const auto& [id, lp] : t.top) top.push_back({{"token", tok.Decode({id}, false)}, {"logprob", lp}});
    content.push_back({{"token", tok.Decode({t.id}, false)}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// A harmony (gpt-oss) answer as an OpenAI message: the analysis channel as reasoning_content, calls
// to functions.* as tool_calls (finish_reason "tool_calls"), the rest as content. The markers are
// special tokens, so the ids are decoded with them.
json HarmonyMessage(const tokenizer::Tokenizer& tok, const std::vector<engine::SampledToken>& tokens, json* choice) {
  std::vector<int32_t> ids;
  for (const auto& t : tokens) ids.push_back(t.id);
  const tokenizer::HarmonyOutput out = tokenizer::ParseHarmony(tok.Decode(ids, /*skip_special=*/false));
  json message = {{"role", "assistant"}, {"content", out.content}};
  if (!out.reasoning.empty()) message["reasoning_content"] = out.reasoning;
  if (!out.tool_calls.empty()) {
    json calls = json::array();
    for (size_t i = 0; i < out.tool_calls.size(); ++i) {
      calls.push_back({{"id", absl::StrCat("call_", i)},
                       {"type", "function"},
                       {"function", {{"name", out.tool_calls[i].name}, {"arguments", out.tool_calls[i].arguments}}}});
    }
    message["tool_calls"] = calls;
    if (out.content.empty()) message["content"] = nullptr;
    (*choice)["finish_reason"] = "tool_calls";
  }
  return message;
}

class Handler {
 public:
  Handler(RouterCore* core, RouterMetrics* metrics, const HttpOptions& options)
      : core_(core), metrics_(metrics), options_(options) {}

  void Error(httplib::Response& res, const std::string& endpoint, const absl::Status& status) {
    res.status = rpc::HttpStatus(status);
    res.set_content(rpc::OpenAiErrorBody(status), "application/json");
    metrics_->CountRequest(endpoint, res.status);
  }

  // Before routing: 401 in OpenAI's shape for a request without a valid key.
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    auto who = auth::AuthorizeHttp(options_.access, req.path, req.get_header_value("Authorization"));
    if (who.ok()) return true;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(rpc::OpenAiErrorBody(401, std::string(who.status().message()), "invalid_request_error",
                                         "invalid_api_key"),
                    "application/json");
    metrics_->CountRequest("unauthenticated", 401);
    return false;
  }

  void Models(const httplib::Request& req, httplib::Response& res) {
    json j = {{"object", "list"},
              {"data", json::array({{{"id", core_->model_name()},
                                     {"object", "model"},
                                     {"created", 0},
                                     {"owned_by", "colibri"},
                                     {"max_model_len", core_->context_length()}}})}};
    res.set_content(Dump(j), "application/json");
    metrics_->CountRequest("models", 200);
  }

  void Completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const std::string endpoint = chat ? "chat_completions" : "completions";
    auto parsed = ParseOpenAiRequest(req.body, chat);
    if (!parsed.ok()) return Error(res, endpoint, parsed.status());
    // The client's leaving (seen by a ClientWatch on its connection) cancels the request while
    // it is queued or prefilling, not only once tokens are written.
    auto cancel = std::make_shared<CancelFlag>();
    parsed->params.cancel = cancel;
    const int client_fd = CurrentConnectionSocket();
    if (auto st = core_->CheckModel(parsed->model); !st.ok()) return Error(res, endpoint, st);
    absl::StatusOr<std::vector<int32_t>> ids = chat                          ? core_->EncodeChat(parsed->messages, parsed->chat_options)
                                               : !parsed->prompt_ids.empty() ? parsed->prompt_ids
                                                                             : core_->EncodeText(parsed->prompt);
    if (!ids.ok()) return Error(res, endpoint, ids.status());
    parsed->params.prompt = std::move(*ids);
    if (auto who = auth::AuthorizeHttp(options_.access, req.path, req.get_header_value("Authorization")); who.ok()) {
      parsed->params.session_id = ScopedSessionId(*who, parsed->params.session_id);
    }
    if (chat && parsed->params.session_id.empty()) parsed->params.affinity_key = ComputePool::ChatKey(parsed->messages);
    if (static_cast<int64_t>(parsed->params.prompt.size()) >= core_->context_length()) {
      return Error(res, endpoint,
                   absl::InvalidArgumentError(absl::StrCat(
                       "This model's maximum context length is ", core_->context_length(), " tokens, but the prompt has ",
                       parsed->params.prompt.size(), " tokens")));
    }
    auto request = std::make_shared<OpenAiRequest>(std::move(*parsed));
    const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = NowSeconds();
    if (!request->stream) {
      ClientWatch watch(client_fd, cancel);
      return Blocking(res, endpoint, *request, id, created);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, request, id, created, endpoint, client_fd, cancel](
                                                              size_t, httplib::DataSink& sink) {
      ClientWatch watch(client_fd, cancel);
      Stream(sink, endpoint, *request, id, created);
      return true;
    });
  }

 private:
  json Choice(const OpenAiRequest& r, const Delta* delta, const char* finish, bool first) {
    json c = {{"index", 0}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", nullptr}};
    if (r.chat) {
      json d = json::object();
      if (first) d["role"] = "assistant";
      if (delta) d["content"] = delta->text;
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

  void Account(const TextResult& t) {
    metrics_->prompt_tokens->Increment(static_cast<double>(t.prompt_tokens));
    metrics_->completion_tokens->Increment(static_cast<double>(t.completion_tokens));
  }

  void Blocking(httplib::Response& res, const std::string& endpoint, const OpenAiRequest& r, const std::string& id,
                int64_t created) {
    const auto t0 = std::chrono::steady_clock::now();
    metrics_->active_requests->Increment();
    std::vector<engine::SampledToken> tokens;
    auto result = core_->Run(r.params, [&](const Delta& d) {
      tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
      return true;
    });
    metrics_->active_requests->Decrement();
    if (!result.ok()) return Error(res, endpoint, result.status());
    if (IsCancelled(r.params.cancel)) {  // the client is gone: nobody reads an answer
      res.status = 499;
      metrics_->CountRequest(endpoint, 499);
      return;
    }
    Account(*result);
    json choice = {{"index", 0}, {"finish_reason", FinishName(result->finish)}, {"logprobs", nullptr}};
    if (r.chat && tokenizer::IsHarmonyTemplate(core_->tokenizer().chat_template())) {
      choice["message"] = HarmonyMessage(core_->tokenizer(), tokens, &choice);
    } else if (r.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", result->text}};
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
    metrics_->request_seconds->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    metrics_->CountRequest(endpoint, 200);
  }

  void Stream(httplib::DataSink& sink, const std::string& endpoint, const OpenAiRequest& r, const std::string& id,
              int64_t created) {
    const auto t0 = std::chrono::steady_clock::now();
    const char* object = r.chat ? "chat.completion.chunk" : "text_completion";
    auto send = [&](const json& chunk) {
      std::string line = absl::StrCat("data: ", Dump(chunk), "\n\n");
      return sink.write(line.data(), line.size());
    };
    auto chunk = [&](json choices) {
      return json{{"id", id}, {"object", object}, {"created", created}, {"model", core_->model_name()},
                  {"choices", std::move(choices)}};
    };
    metrics_->active_requests->Increment();
    bool first = true, client_ok = true;
    if (r.chat) client_ok = send(chunk(json::array({Choice(r, nullptr, nullptr, true)})));
    // Generation runs on its own thread; this thread writes to the client. While nothing comes
    // (a long prefill, a queue wait) it sends SSE comments, which keep proxies from timing the
    // connection out and notice a client that went away, so the request is cancelled at once.
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
    std::unique_lock<std::mutex> lock(ch.mu);
    for (;;) {
      const bool ready = ch.cv.wait_for(lock, keepalive, [&] { return !ch.deltas.empty() || ch.done; });
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
        if (client_ok) client_ok = send(chunk(json::array({Choice(r, &d, nullptr, false)})));
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
    absl::StatusOr<TextResult>& result = ch.result;
    metrics_->active_requests->Decrement();
    if (!result.ok()) {
      // Headers are gone already: report the error in-band, in OpenAI's error shape.
      std::string line = absl::StrCat("data: ", rpc::OpenAiErrorBody(result.status()), "\n\n");
      sink.write(line.data(), line.size());
      metrics_->CountRequest(endpoint, rpc::HttpStatus(result.status()));
    } else if (client_ok) {
      Account(*result);
      send(chunk(json::array({Choice(r, nullptr, FinishName(result->finish), false)})));
      if (r.include_usage) {
        json u = chunk(json::array());
        u["usage"] = Usage(*result);
        send(u);
      }
      metrics_->CountRequest(endpoint, 200);
    } else {
      metrics_->CountRequest(endpoint, 499);
    }
    static const std::string kDone = "data: [DONE]\n\n";
    if (client_ok) sink.write(kDone.data(), kDone.size());
    sink.done();
    metrics_->request_seconds->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  RouterCore* core_;
  RouterMetrics* metrics_;
  HttpOptions options_;
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
  if (colon != std::string::npos && host.find(':', colon + 1) == std::string::npos) host.resize(colon);
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
  app->add_option("--host", o->host, "HTTP bind address (0.0.0.0: every interface)")->capture_default_str();
  app->add_option("--port", o->port, "HTTP port (0 picks one)")->capture_default_str();
  app->add_option("--http-threads", o->threads, "HTTP worker threads")->capture_default_str();
  app->add_option("--sse-keepalive-ms", o->sse_keepalive_ms, "SSE keep-alive comment interval while a stream is silent")
      ->capture_default_str();
  app->add_option("--allowed-hosts", o->allowed_hosts,
                  "Host header names accepted (comma-separated; '*': any). Default: loopback names only when "
                  "bound to loopback (against DNS rebinding), any name otherwise")
      ->delimiter(',');
  app->add_option_function<std::string>(
         "--max-request-bytes",
         [o](const std::string& text) {
           auto bytes = ParseSize(text);
           if (!bytes.ok() || *bytes == 0) throw CLI::ValidationError("--max-request-bytes", "expects a size like 8M");
           o->max_request_bytes = static_cast<size_t>(*bytes);
         },
         "Largest request body accepted (413 above it)")
      ->default_str("8M");
  AddHttpLimitFlags(app, &o->limits);
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(RouterCore* core, RouterMetrics* metrics,
                                                        const HttpOptions& options) {
  auto api = std::unique_ptr<HttpApi>(new HttpApi());
  api->server_ = MakeBoundedHttpServer(options.threads, options.limits);  // queue, deadlines, /health
  auto handler = std::make_shared<Handler>(core, metrics, options);
  auto& s = *api->server_;
  s.set_payload_max_length(options.max_request_bytes);
  // Before any route: the key check, the Host check (DNS rebinding; /health stays open to
  // probes) and JSON-only POST bodies (no form or text/plain request from a web page).
  s.set_pre_routing_handler([handler, options](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/health" && !HostAllowed(options, q.get_header_value("Host"))) {
      r.status = 403;
      r.set_content(rpc::OpenAiErrorBody(403, absl::StrCat("Host '", q.get_header_value("Host"),
                                                           "' is not allowed (see --allowed-hosts)"),
                                         "invalid_request_error", "host_not_allowed"),
                    "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!handler->Authorized(q, r)) return httplib::Server::HandlerResponse::Handled;
    if (q.method == "POST" && !JsonContentType(q)) {
      r.status = 415;
      r.set_content(rpc::OpenAiErrorBody(415, "Content-Type must be application/json", "invalid_request_error",
                                         "unsupported_media_type"),
                    "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.Post("/v1/chat/completions",
         [handler](const httplib::Request& q, httplib::Response& r) { handler->Completions(q, r, true); });
  s.Post("/v1/completions",
         [handler](const httplib::Request& q, httplib::Response& r) { handler->Completions(q, r, false); });
  s.Get("/v1/models", [handler](const httplib::Request& q, httplib::Response& r) { handler->Models(q, r); });
  s.Get("/health", [](const httplib::Request&, httplib::Response& r) {
    r.set_content("{\"status\":\"ok\"}", "application/json");
  });
  s.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& r) {
    if (metrics->before_scrape) metrics->before_scrape();
    r.set_content(metrics::Serialize(*metrics->registry), "text/plain; version=0.0.4");
  });
  for (const auto& route : options.extra_routes) {
    auto admin = [handler, h = route.handler](const httplib::Request& q, httplib::Response& r) {
      auto [status, body] = h(q.body);
      r.status = status;
      r.set_content(body, "application/json");
    };
    if (route.method == "POST") {
      s.Post(route.path, admin);
    } else {
      s.Get(route.path, admin);
    }
  }
  s.set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (r.body.empty()) {
      r.set_content(rpc::OpenAiErrorBody(r.status, absl::StrCat("HTTP ", r.status), "invalid_request_error",
                                         r.status == 404 ? "not_found" : "error"),
                    "application/json");
    }
  });
  if (options.port == 0) {
    api->port_ = s.bind_to_any_port(options.host);
    if (api->port_ <= 0) return absl::UnavailableError(absl::StrCat("http: cannot bind ", options.host));
  } else {
    if (!s.bind_to_port(options.host, options.port)) {
      return absl::UnavailableError(absl::StrCat("http: cannot bind ", options.host, ":", options.port, " (in use?)"));
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
