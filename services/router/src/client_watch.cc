#include "client_watch.h"

#include <poll.h>
#include <sys/socket.h>

namespace colibri::router {

bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {  // readable: EOF, or bytes of a pipelined request (not a close)
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

ClientWatch::ClientWatch(int fd, CancelToken token, std::chrono::milliseconds interval)
    : token_(std::move(token)) {
  if (fd < 0) return;
  thread_ = std::thread([this, fd, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (PeerClosed(fd)) {
        lock.unlock();
        token_->Cancel();
        return;
      }
      cv_.wait_for(lock, interval, [&] { return stop_; });
    }
  });
}

ClientWatch::~ClientWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace colibri::router
