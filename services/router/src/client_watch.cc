#include "client_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace colibri::router {
namespace {

// Port and printable address of a socket address (IPv4, IPv6 and v4-mapped IPv6 alike).
bool Endpoint(const sockaddr_storage& sa, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    if (!inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf))) return false;
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    if (!inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf))) return false;
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

}  // namespace

int FindConnectionSocket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof(local), plen = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    std::string laddr, paddr;
    int lport = 0, pport = 0;
    if (!Endpoint(local, &laddr, &lport) || !Endpoint(peer, &paddr, &pport)) continue;
    if (lport == local_port && pport == remote_port && paddr == remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

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

ClientWatch::ClientWatch(int fd, CancelToken token, std::chrono::milliseconds interval) : token_(std::move(token)) {
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
