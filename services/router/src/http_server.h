// An httplib::Server whose connections are bounded, for an API exposed to a network.
//
// cpp-httplib hands every accepted connection to a thread pool with an unbounded queue and
// reads requests with a per-read timeout only: a client sending its headers one byte a second
// holds a worker forever, and a burst of connections queues without limit. This server owns
// the connection loop instead:
//   - `threads` workers serve connections; at most `max_queued` accepted connections wait for
//     one, and past that a connection is answered 503 (Retry-After) at once and closed.
//   - Deadlines per request, not per read: the request line and headers within
//     `header_timeout`, the body within `body_timeout` after them; a keep-alive connection
//     with no new request for `idle_timeout` is closed, and serves at most `keep_alive_max`
//     requests. A write to a client that stops reading fails after `write_timeout`.
//   - `/health` is answered even when every worker is busy: an accepted connection goes to a
//     free worker when there is one, else to a small front lane (`reserved_threads`). That
//     peeks at the request line (without consuming it, for at most `health_timeout`) and
//     serves `GET /health` itself, queues anything else for a worker, or answers 503 when the
//     queue is full. When the front lane is full too, the accept loop answers 503 itself.
// Limits of the design: a client can still hold a worker for header_timeout + body_timeout
// per request (slowloris costs it one connection per worker, each dropped at its deadline).
#pragma once

#include <chrono>
#include <memory>

#include "CLI/CLI.hpp"

namespace httplib {
class Server;
}

namespace colibri::router {

struct HttpLimits {
  int max_queued = 64;                              // connections waiting for a worker
  std::chrono::milliseconds header_timeout{10000};  // request line + headers
  std::chrono::milliseconds body_timeout{60000};    // the body, after the headers
  std::chrono::milliseconds idle_timeout{5000};     // keep-alive wait for the next request
  int keep_alive_max = 100;                         // requests per connection
  std::chrono::milliseconds write_timeout{30000};   // one write to the client
  int reserved_threads = 2;                         // the front lane (health, dispatch, 503)
  std::chrono::milliseconds health_timeout{2000};   // a /health request on the front lane
};

// --http-max-queued, --http-header-timeout, --http-body-timeout, --http-idle-timeout,
// --http-keep-alive-max, --http-write-timeout (timeouts in seconds).
void AddHttpLimitFlags(CLI::App* app, HttpLimits* limits);

// The socket of the connection the calling thread is serving a request of (from a route handler
// or a content provider of a server made below), or -1 outside one. For watching whether the
// client is still there (client_watch.h); never read, write or close it.
int CurrentConnectionSocket();

// A server with `threads` workers and these limits; routes are added by the caller as usual.
std::unique_ptr<httplib::Server> MakeBoundedHttpServer(int threads, const HttpLimits& limits);

}  // namespace colibri::router
