// The OpenAI-compatible HTTP API: POST /v1/chat/completions and /v1/completions (SSE streaming
// and not), Anthropic's POST /v1/messages (its event stream and error shape, over the same
// request validation and run), GET /v1/models, GET /health, GET /metrics, GET /stats (the web
// page's JSON: served names, expert heat per layer, the node's tiers), the web page itself (GET /,
// /app.js, /style.css: static, embedded, the only routes open without a key, since they hold no
// data), and any extra (admin) routes. Errors use the API's JSON error shape. With API keys, one check before routing guards
// every route but /health (see auth::AuthorizeHttp); the key comes as "Authorization: Bearer"
// or, as Anthropic clients send it, "x-api-key".
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/auth/http_auth.h"
#include "http_server.h"
#include "router_core.h"
#include "router_metrics.h"

namespace httplib {
class Server;
}

namespace colibri::router {

struct HttpOptions {
  std::string host = "127.0.0.1";  // another address is an explicit choice (warned without a key)
  int port = 8080;                 // 0 picks a free port
  auth::HttpPolicy access;         // API keys: every route but /health (and public /metrics)
  int threads = 16;
  HttpLimits limits;            // connection queue, slow-client deadlines (http_server.h)
  int sse_keepalive_ms = 5000;  // SSE comment after this much silence on a stream
  // Host header names accepted (DNS rebinding: a web page's script reaching a local server
  // through a name it controls). Empty: loopback names only when bound to a loopback address,
  // any name otherwise. Entries are names or addresses without a port; "*" accepts any.
  std::vector<std::string> allowed_hosts;
  size_t max_request_bytes = 8 << 20;  // request bodies above this are refused (413)
  // A request field the route does not know is a 400 naming it instead of being ignored (and
  // named in x-colibri-ignored-fields); fields with no effect by design stay accepted.
  bool strict_fields = false;
  // Extra JSON endpoints (colibri-server's /admin/...), behind the same API key; a GET /health
  // among them replaces the plain one (and stays open like it).
  std::vector<metrics::HttpRoute> extra_routes;
  // colibri-server: the node's expert tiers as a JSON object for GET /stats ("node"); unset in
  // the cluster router, whose compute nodes report their own.
  std::function<std::string()> node_stats;
};

// The Host check against DNS rebinding: `host_header` (a Host value, port optional) is accepted
// when it names an entry of options.allowed_hosts ("*": any), or, with none given, when the
// server is bound off loopback or the name is a loopback one (localhost, 127.x, ::1).
bool HostAllowed(const HttpOptions& options, const std::string& host_header);

// The HTTP server's flags, one definition for colibri-router and colibri-server: --host, --port,
// --http-threads, --sse-keepalive-ms, --allowed-hosts, --max-request-bytes and the connection
// limits (AddHttpLimitFlags).
void AddHttpFlags(CLI::App* app, HttpOptions* options);

// --served-model-name (one or more, comma- or space-separated): RouterCore::SetServedNames.
void AddServedNameFlag(CLI::App* app, std::vector<std::string>* names);

class HttpApi {
 public:
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(RouterCore* core, RouterMetrics* metrics,
                                                        const HttpOptions& options);
  ~HttpApi();
  int port() const { return port_; }

 private:
  HttpApi() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace colibri::router
