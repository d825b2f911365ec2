// colibri-cli chat: an interactive terminal chat, with the model in this process (--model DIR,
// the node flags of cli_node.h) or on a running server (--url http://host:port, its OpenAI API).
// Replies stream as they are generated; the conversation is kept and sent each turn. After each
// reply one line: tokens, decode tok/s, time to first token, expert cache hit rate and resident
// memory (this process's with --model; the server's cache numbers from its /metrics with --url).
// Commands: /reset (forget the conversation), /stats (totals so far), /quit (or end of input).
// Exit status: 0 ok; 1 the model or server failed; 2 bad arguments.
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cli_node.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "in_process_compute.h"
#include "nlohmann/json.hpp"
#include "router_core.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using colibri::tokenizer::ChatMessage;

struct ChatFlags {
  NodeFlags node;
  std::string url, api_key, system;
  int64_t max_tokens = 512;
  float temperature = 0.7f;
  uint64_t seed = 0;  // 0: a random seed per turn
};

struct Turn {
  int64_t tokens = 0;
  double ttft = 0, decode_seconds = 0;
  double hit_rate = -1;    // -1: unknown
  uint64_t rss_bytes = 0;  // 0: unknown
  // Speculative decoding in this turn: verify passes, drafted and accepted tokens (0: none).
  double verify_passes = 0, draft_tokens = 0, accepted_tokens = 0;
  double bytes_read = -1;  // expert bytes read below the cache (-1: unknown)
  std::string text;
};

uint64_t SelfRss() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Where replies come from. Send streams the reply's text through on_text and returns its numbers.
class ChatBackend {
 public:
  virtual ~ChatBackend() = default;
  virtual absl::StatusOr<Turn> Send(const std::vector<ChatMessage>& messages,
                                    const std::function<void(const std::string&)>& on_text) = 0;
};

class LocalBackend : public ChatBackend {
 public:
  static absl::StatusOr<std::unique_ptr<LocalBackend>> Create(
      const ChatFlags& f, std::unique_ptr<colibri::compute::ComputeNode> node) {
    auto b = std::unique_ptr<LocalBackend>(new LocalBackend(f));
    b->node_ = std::move(node);
    ASSIGN_OR_RETURN(b->core_, colibri::router::MakeRouterCore(
                                   f.node.options.model_dir,
                                   colibri::router::MakeInProcessComputeClient(b->node_.get())));
    return b;
  }

  absl::StatusOr<Turn> Send(const std::vector<ChatMessage>& messages,
                            const std::function<void(const std::string&)>& on_text) override {
    colibri::router::TextRequest req;
    ASSIGN_OR_RETURN(req.prompt, core_->EncodeChat(messages));
    req.max_tokens = f_.max_tokens;
    req.sampling.temperature = f_.temperature;
    req.sampling.seed = f_.seed ? f_.seed : std::random_device{}();
    const auto before = node_->cache_stats();
    const auto& ec = node_->engine().counters();
    const double passes0 = static_cast<double>(ec.verify_passes.load());
    const double drafted0 = static_cast<double>(ec.draft_tokens.load());
    const double accepted0 = static_cast<double>(ec.accepted_draft_tokens.load());
    const auto t0 = Clock::now();
    Clock::time_point first;
    bool any = false;
    auto result = core_->Run(req, [&](const colibri::router::Delta& d) {
      if (!any && !d.tokens.empty()) {
        first = Clock::now();
        any = true;
      }
      if (!d.text.empty()) on_text(d.text);
      return true;
    });
    if (!result.ok()) return result.status();
    const auto end = Clock::now();
    const auto after = node_->cache_stats();
    Turn t;
    t.tokens = result->completion_tokens;
    t.text = result->text;
    t.ttft = any ? std::chrono::duration<double>(first - t0).count() : 0;
    t.decode_seconds = any ? std::chrono::duration<double>(end - first).count() : 0;
    const uint64_t lookups = after.lookups() - before.lookups();
    t.hit_rate = lookups ? static_cast<double>(after.hits - before.hits) / lookups : -1;
    t.rss_bytes = SelfRss();
    t.verify_passes = static_cast<double>(ec.verify_passes.load()) - passes0;
    t.draft_tokens = static_cast<double>(ec.draft_tokens.load()) - drafted0;
    t.accepted_tokens = static_cast<double>(ec.accepted_draft_tokens.load()) - accepted0;
    t.bytes_read = static_cast<double>(after.bytes_fetched - before.bytes_fetched);
    return t;
  }

 private:
  explicit LocalBackend(const ChatFlags& f) : f_(f) {}
  ChatFlags f_;
  std::unique_ptr<colibri::compute::ComputeNode> node_;
  std::unique_ptr<colibri::router::RouterCore> core_;
};

// Sums a Prometheus counter's samples (every label set) in exposition text; -1 when absent.
double MetricSum(const std::string& text, const std::string& name, const std::string& labels = "") {
  double total = -1;
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos);
    const std::string line =
        text.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    const bool start = pos == 0 || text[pos - 1] == '\n';
    pos += name.size();
    if (!start || line.size() <= name.size() ||
        (line[name.size()] != ' ' && line[name.size()] != '{'))
      continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    total = (total < 0 ? 0 : total) + std::atof(line.substr(line.rfind(' ') + 1).c_str());
  }
  return total;
}

class RemoteBackend : public ChatBackend {
 public:
  explicit RemoteBackend(const ChatFlags& f) : f_(f), client_(f.url) {
    client_.set_connection_timeout(10);
    client_.set_read_timeout(600);
    if (!f.api_key.empty()) headers_.emplace("Authorization", "Bearer " + f.api_key);
  }

  absl::StatusOr<Turn> Send(const std::vector<ChatMessage>& messages,
                            const std::function<void(const std::string&)>& on_text) override {
    Json body = {{"messages", Json::array()},
                 {"max_tokens", f_.max_tokens},
                 {"temperature", f_.temperature},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (f_.seed) body["seed"] = f_.seed;
    for (const auto& m : messages)
      body["messages"].push_back({{"role", m.role}, {"content", m.content}});
    const auto cache_before = CacheCounters();
    const auto t0 = Clock::now();
    Clock::time_point first;
    bool any = false;
    Turn t;
    std::string pending, error;
    auto on_data = [&](const char* data, size_t n) {
      pending.append(data, n);
      size_t end;
      while ((end = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
        Json j = Json::parse(event.substr(6), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) error = j["error"].value("message", "error");
        if (j.contains("usage") && j["usage"].is_object())
          t.tokens = j["usage"].value("completion_tokens", 0);
        if (!j.contains("choices") || j["choices"].empty()) continue;
        const Json& delta = j["choices"][0]["delta"];
        if (delta.contains("content") && delta["content"].is_string()) {
          const std::string text = delta["content"];
          if (!any) {
            first = Clock::now();
            any = true;
          }
          t.text += text;
          on_text(text);
        }
      }
      return true;
    };
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.headers = headers_;
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data, n);
        return true;
      }
      return on_data(data, n);
    };
    auto res = client_.send(req);
    if (!res)
      return absl::UnavailableError("cannot reach " + f_.url + ": " +
                                    httplib::to_string(res.error()));
    if (status != 200) {
      Json j = Json::parse(error_body, nullptr, false);
      std::string msg = !j.is_discarded() && j.contains("error")
                            ? j["error"].value("message", error_body)
                            : error_body;
      return absl::UnknownError(absl::StrFormat("%s answered %d: %s", f_.url, status, msg));
    }
    if (!error.empty()) return absl::UnknownError(error);
    const auto end = Clock::now();
    t.ttft = any ? std::chrono::duration<double>(first - t0).count() : 0;
    t.decode_seconds = any ? std::chrono::duration<double>(end - first).count() : 0;
    const auto cache_after = CacheCounters();
    if (cache_before.first >= 0 && cache_after.first > cache_before.first) {
      t.hit_rate =
          (cache_after.second - cache_before.second) / (cache_after.first - cache_before.first);
    }
    return t;
  }

 private:
  // The server's RAM-tier expert lookups and hits (colibri-server's /metrics); -1 when absent.
  std::pair<double, double> CacheCounters() {
    auto res = client_.Get("/metrics", headers_);
    if (!res || res->status != 200) return {-1, -1};
    const std::string name = "colibri_compute_expert_cache_lookups_total";
    return {MetricSum(res->body, name, "tier=\"ram\""),
            MetricSum(res->body, name, "result=\"hit\",tier=\"ram\"")};
  }

  ChatFlags f_;
  httplib::Client client_;
  httplib::Headers headers_;
};

std::string TurnLine(const Turn& t) {
  const double tps = t.tokens > 1 && t.decode_seconds > 0 ? (t.tokens - 1) / t.decode_seconds : 0;
  std::string line = absl::StrFormat("[%d tokens, %.2f tok/s, TTFT %.3f s", t.tokens, tps, t.ttft);
  line += t.hit_rate >= 0 ? absl::StrFormat(", hit rate %.1f%%", 100 * t.hit_rate) : ", hit rate -";
  line += t.rss_bytes ? ", RSS " + colibri::FormatSize(t.rss_bytes) : ", RSS -";
  line += "]";
  // Expert reads and speculative decoding, in a bracket of their own.
  std::string more;
  if (t.bytes_read >= 0 && t.tokens > 0) {
    more =
        colibri::FormatSize(static_cast<uint64_t>(t.bytes_read / static_cast<double>(t.tokens))) +
        " read/token";
  }
  if (t.verify_passes > 0 && t.draft_tokens > 0) {
    more += absl::StrFormat("%sdrafts %.0f%% accepted, %.2f tokens/pass", more.empty() ? "" : ", ",
                            100 * t.accepted_tokens / t.draft_tokens,
                            (t.accepted_tokens + t.verify_passes) / t.verify_passes);
  }
  return more.empty() ? line : line + " [" + more + "]";
}

int Chat(const ChatFlags& f) {
  if (f.url.empty() == f.node.options.model_dir.empty())
    Fail(2, "chat: give --model DIR or --url URL (one of them)");
  std::unique_ptr<ChatBackend> backend;
  if (f.url.empty()) {
    std::unique_ptr<colibri::compute::ComputeNode> node;
    if (int rc = CreateNode(f.node, &node)) throw CLI::RuntimeError(rc);
    auto local = LocalBackend::Create(f, std::move(node));
    if (!local.ok()) Fail(1, std::string(local.status().message()));
    backend = std::move(*local);
  } else {
    backend = std::make_unique<RemoteBackend>(f);
  }
  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!f.system.empty()) history.push_back({"system", f.system});
  };
  reset();
  int turns = 0;
  int64_t tokens = 0, decoded = 0;  // decoded: tokens after each turn's first (tok/s as per turn)
  double decode_seconds = 0, ttft = 0;
  std::printf("colibri chat (%s). /reset, /stats, /quit\n",
              f.url.empty() ? f.node.options.model_dir.c_str() : f.url.c_str());
  std::string line;
  for (;;) {
    std::printf("> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/quit" || line == "/exit") break;
    if (line.empty()) continue;
    if (line == "/reset") {
      reset();
      std::printf("(conversation cleared)\n");
      continue;
    }
    if (line == "/stats") {
      std::printf(
          "[%d turns, %ld tokens, %.2f tok/s mean, TTFT %.3f s mean, %zu messages in history]\n",
          turns, static_cast<long>(tokens), decode_seconds > 0 ? decoded / decode_seconds : 0.0,
          turns ? ttft / turns : 0.0, history.size());
      continue;
    }
    if (line[0] == '/') {
      std::printf("(unknown command %s: /reset, /stats, /quit)\n", line.c_str());
      continue;
    }
    history.push_back({"user", line});
    auto turn = backend->Send(history, [](const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    if (!turn.ok()) {
      history.pop_back();
      std::printf("\n(error: %s)\n", std::string(turn.status().message()).c_str());
      continue;
    }
    history.push_back({"assistant", turn->text});
    ++turns;
    tokens += turn->tokens;
    decoded += std::max<int64_t>(0, turn->tokens - 1);
    decode_seconds += turn->decode_seconds;
    ttft += turn->ttft;
    std::printf("\n%s\n", TurnLine(*turn).c_str());
  }
  std::printf("\n");
  return 0;
}

}  // namespace

void AddChatCommand(CLI::App& app) {
  auto f = std::make_shared<ChatFlags>();
  auto* cmd = app.add_subcommand(
      "chat", "Interactive chat in the terminal (a model here, or a server's API)");
  AddCliNodeFlags(cmd, &f->node, /*model_required=*/false);
  cmd->add_option("--url", f->url,
                  "A running colibri-server or router (http://host:port) instead of --model");
  cmd->add_option("--api-key", f->api_key, "Bearer key for --url, if the server needs one");
  cmd->add_option("--system", f->system, "System prompt");
  cmd->add_option("--max-tokens", f->max_tokens, "Most tokens per reply")->capture_default_str();
  cmd->add_option("--temperature", f->temperature, "0: greedy")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Sampling seed (0: random each turn)")->capture_default_str();
  cmd->callback([f] { throw CLI::RuntimeError(Chat(*f)); });
}
