// Noticing that an HTTP client went away while its request waits in a queue or prefills, when
// nothing is being written to it: a watcher polls the connection's socket
// (CurrentConnectionSocket, http_server.h) for the peer's close (POLLRDHUP / EOF) every
// `interval` and cancels the request's CancelToken, which the engine checks at admission and
// between prefill chunks.
//
// Thread-safe. A ClientWatch runs one polling thread for its lifetime (one per watched request:
// the HTTP server's worker count bounds them) and stops it in its destructor, before the
// connection can be closed and its descriptor reused.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "colibri/core/cancel.h"

namespace colibri::router {

// True when the peer has closed its side of the connection (or it failed).
bool PeerClosed(int fd);

class ClientWatch {
 public:
  // fd < 0 (socket not found): nothing is watched.
  ClientWatch(int fd, CancelToken token,
              std::chrono::milliseconds interval = std::chrono::milliseconds(100));
  ~ClientWatch();
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

  // Whether the watcher saw the client go away.
  bool client_gone() const { return IsCancelled(token_); }

 private:
  CancelToken token_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace colibri::router
