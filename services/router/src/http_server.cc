#include "http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/rpc/status.h"

namespace colibri::router {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Request line and headers larger than this are refused (httplib bounds each line only).
constexpr size_t kMaxHeaderBytes = 64 << 10;

// Which lane runs the current thread's connection job (process_and_close_socket has no other
// way to know: httplib hands the task queue an opaque function).
enum class Lane { kNone, kFront, kReject };
thread_local Lane tls_lane = Lane::kNone;
// The connection Serve() is handling on this thread (CurrentConnectionSocket), else -1.
thread_local int tls_connection = -1;

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// poll() for `events` until `deadline`; false on timeout or error.
bool WaitFor(int sock, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{sock, events, 0};
    const int rc = ::poll(&p, 1, MillisLeft(deadline));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

// A socket stream with a deadline for the whole request (not per read) and a cap on header
// bytes. Reads are buffered (httplib reads request lines a byte at a time).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, const HttpLimits& limits) : sock_(sock), limits_(limits) {}

  // A new request starts: its line and headers are due by `deadline`.
  void StartRequest(Clock::time_point deadline) {
    deadline_ = deadline;
    in_headers_ = true;
    header_bytes_ = 0;
    match_ = 0;
  }
  bool buffered() const { return pos_ < end_; }
  // A read failed for a deadline or the header cap: the connection must not serve more.
  bool cut() const { return cut_; }

  bool is_readable() const override { return buffered() || WaitFor(sock_, POLLIN, deadline_); }
  bool is_writable() const override {
    if (!WaitFor(sock_, POLLOUT, Clock::now() + limits_.write_timeout)) return false;
    // Still connected? A readable socket with nothing to peek is one the client closed.
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    char c;
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if ((in_headers_ && header_bytes_ >= kMaxHeaderBytes) || !WaitFor(sock_, POLLIN, deadline_)) {
        cut_ = true;  // too large, or late: drop the client
        return -1;
      }
      ssize_t n;
      do {
        n = ::recv(sock_, buf_, sizeof(buf_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    if (in_headers_) ScanHeaders(ptr, n);
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!WaitFor(sock_, POLLOUT, Clock::now() + limits_.write_timeout)) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  // Watches for the blank line ending the headers; from there the body has its own deadline.
  void ScanHeaders(const char* p, size_t n) {
    static constexpr char kEnd[] = "\r\n\r\n";
    header_bytes_ += n;
    for (size_t i = 0; i < n && in_headers_; ++i) {
      match_ = p[i] == kEnd[match_] ? match_ + 1 : (p[i] == '\r' ? 1 : 0);
      if (match_ == 4) {
        in_headers_ = false;
        deadline_ = Clock::now() + limits_.body_timeout;
      }
    }
  }

  void Address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    auto* sa = reinterpret_cast<sockaddr*>(&addr);
    if ((remote ? ::getpeername(sock_, sa, &len) : ::getsockname(sock_, sa, &len)) != 0) return;
    char text[INET6_ADDRSTRLEN] = {};
    if (addr.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      port = ntohs(in6->sin6_port);
    }
    ip = text;
  }

  const int sock_;
  const HttpLimits& limits_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool in_headers_ = true;
  bool cut_ = false;
  size_t header_bytes_ = 0;
  int match_ = 0;
  char buf_[4096];
  size_t pos_ = 0, end_ = 0;
};

class BoundedServer;

// The task queue httplib's accept loop feeds: a front lane of reserved threads and the
// workers, each with a bounded queue.
class ConnectionLanes final : public httplib::TaskQueue {
 public:
  ConnectionLanes(int workers, const HttpLimits& limits) : limits_(limits) {
    for (int i = 0; i < std::max(1, limits.reserved_threads); ++i)
      threads_.emplace_back([this] { Run(front_); });
    for (int i = 0; i < std::max(1, workers); ++i) threads_.emplace_back([this] { Run(workers_); });
    // Serving starts with every thread waiting, so the first connections find free workers.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock,
             [&] { return front_.idle + workers_.idle == static_cast<int>(threads_.size()); });
  }

  // An accepted connection (from the accept loop).
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A free worker takes the connection directly (a burst of clients is not a front-lane job).
      if (workers_.idle > static_cast<int>(workers_.jobs.size())) {
        workers_.jobs.push_back(std::move(fn));
        cv_.notify_all();
        return;
      }
      // The front lane holds a connection for at most health_timeout: a few per thread.
      if (front_.jobs.size() < static_cast<size_t>(16 * std::max(1, limits_.reserved_threads))) {
        front_.jobs.push_back(std::move(fn));
        cv_.notify_all();
        return;
      }
    }
    tls_lane = Lane::kReject;  // everything is full: answered 503 here, without reading
    fn();
    tls_lane = Lane::kNone;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // A worker is waiting for a connection right now.
  bool WorkerFree() {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_.idle > static_cast<int>(workers_.jobs.size());
  }
  // Queues a connection for a worker; false when max_queued wait already (and none is free).
  bool ToWorker(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    const int waiting = static_cast<int>(workers_.jobs.size()) - workers_.idle;
    if (waiting >= limits_.max_queued) return false;
    workers_.jobs.push_back(std::move(job));
    cv_.notify_all();
    return true;
  }

 private:
  struct Queue {
    std::deque<std::function<void()>> jobs;
    int idle = 0;
  };

  void Run(Queue& q) {
    tls_lane = &q == &front_ ? Lane::kFront : Lane::kNone;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      q.idle++;
      cv_.notify_all();  // the constructor waits for every thread to be idle once
      cv_.wait(lock, [&] { return stop_ || !q.jobs.empty(); });
      q.idle--;
      if (q.jobs.empty()) return;  // stop_ and drained
      std::function<void()> job = std::move(q.jobs.front());
      q.jobs.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const HttpLimits limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  Queue front_, workers_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class BoundedServer final : public httplib::Server {
 public:
  BoundedServer(int threads, const HttpLimits& limits) : limits_(limits) {
    new_task_queue = [this, threads] {
      lanes_ = new ConnectionLanes(threads, limits_);
      return lanes_;
    };
  }

 private:
  // httplib calls this for every accepted connection, on the lane its task queue chose.
  bool process_and_close_socket(socket_t sock) override {
    if (tls_lane == Lane::kFront) {
      Dispatch(sock);
    } else if (tls_lane == Lane::kReject) {
      Reject(sock);
    } else {
      Serve(sock, limits_.keep_alive_max, limits_.header_timeout);  // a worker
    }
    return true;
  }

  // On the front lane: to a free worker at once; else /health here, others queued or 503.
  void Dispatch(int sock) {
    auto serve = [this, sock] { Serve(sock, limits_.keep_alive_max, limits_.header_timeout); };
    if (lanes_->WorkerFree() && lanes_->ToWorker(serve)) return;  // one became free meanwhile
    if (IsHealthCheck(sock)) {
      Serve(sock, 1, limits_.health_timeout);
      return;
    }
    if (!lanes_->ToWorker(serve)) Reject(sock);
  }

  // Peeks (without consuming) until the request line shows whether it is GET /health.
  bool IsHealthCheck(int sock) {
    static constexpr std::string_view kHealth = "GET /health";
    const auto deadline = Clock::now() + limits_.health_timeout;
    char buf[16];
    while (WaitFor(sock, POLLIN, deadline)) {
      const ssize_t n = ::recv(sock, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
      if (n <= 0) return false;
      const std::string_view got(buf, static_cast<size_t>(n));
      const size_t common = std::min(got.size(), kHealth.size());
      if (got.substr(0, common) != kHealth.substr(0, common)) return false;
      if (got.size() > kHealth.size())
        return got[kHealth.size()] == ' ' || got[kHealth.size()] == '?';
      if (static_cast<size_t>(n) == sizeof(buf)) return false;
      // Not enough bytes yet (poll stays readable while unread bytes remain): wait for more.
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }

  // Serves up to `max_requests` requests on a connection with per-request deadlines: the first
  // request's headers are due `first_budget` after the worker took the connection; later ones
  // header_timeout after their first byte, which must come within idle_timeout.
  void Serve(int sock, int max_requests, milliseconds first_budget) {
    DeadlineStream strm(sock, limits_);
    tls_connection = sock;
    for (int left = max_requests; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      if (left == max_requests) {
        strm.StartRequest(Clock::now() + first_budget);
      } else {
        if (!strm.buffered() && !WaitReadable(sock, Clock::now() + limits_.idle_timeout)) break;
        strm.StartRequest(Clock::now() + limits_.header_timeout);
      }
      bool closed = false;
      if (!process_request(strm, left == 1, closed, nullptr) || closed || strm.cut()) break;
    }
    tls_connection = -1;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

  // Readable before `deadline`, in slices so that a stopping server is not held up.
  bool WaitReadable(int sock, Clock::time_point deadline) {
    while (svr_sock_ != INVALID_SOCKET) {
      const auto slice = std::min(deadline, Clock::now() + milliseconds(100));
      if (WaitFor(sock, POLLIN, slice)) return true;
      if (Clock::now() >= deadline) return false;
    }
    return false;
  }

  // 503 without reading the request: the client should retry later.
  void Reject(int sock) {
    const std::string body = rpc::OpenAiErrorBody(
        503, "server busy: every HTTP worker is taken and the connection queue is full",
        "server_error", "overloaded");
    const std::string response = absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        "Connection: close\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
    ssize_t sent = ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    ::shutdown(sock, SHUT_WR);
    // Unread request bytes would turn the close into a reset that can lose the answer.
    char sink[4096];
    while (::recv(sock, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    ::close(sock);
  }

  const HttpLimits limits_;
  ConnectionLanes* lanes_ = nullptr;  // owned by httplib while listening
};

}  // namespace

void AddHttpLimitFlags(CLI::App* app, HttpLimits* l) {
  auto seconds = [app](const char* flag, milliseconds* field, const char* help) {
    app->add_option_function<double>(
           flag,
           [field](double s) {
             *field = milliseconds(static_cast<int64_t>(std::max(0.001, s) * 1000));
           },
           help)
        ->default_str(absl::StrCat(static_cast<double>(field->count()) / 1000));
  };
  app->add_option("--http-max-queued", l->max_queued,
                  "HTTP connections waiting for a worker; more are answered 503 at once")
      ->capture_default_str();
  seconds("--http-header-timeout", &l->header_timeout,
          "Seconds for a request's line and headers to arrive (slow clients are dropped)");
  seconds("--http-body-timeout", &l->body_timeout,
          "Seconds for a request body to arrive after its headers");
  seconds("--http-idle-timeout", &l->idle_timeout,
          "Seconds a keep-alive connection may wait for its next request");
  app->add_option("--http-keep-alive-max", l->keep_alive_max,
                  "Requests served on one HTTP connection")
      ->capture_default_str();
  seconds("--http-write-timeout", &l->write_timeout,
          "Seconds one write may wait for a client that stops reading");
}

int CurrentConnectionSocket() { return tls_connection; }

std::unique_ptr<httplib::Server> MakeBoundedHttpServer(int threads, const HttpLimits& limits) {
  return std::make_unique<BoundedServer>(threads, limits);
}

}  // namespace colibri::router
