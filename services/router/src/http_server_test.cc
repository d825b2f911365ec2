// BoundedHttpServer against raw sockets on loopback: slow clients dropped at the header
// deadline, /health answered while the only worker is held, 503 when the queue is full,
// keep-alive idle connections closed, oversized headers refused.
#include "http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace colibri::router {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class BoundedHttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpLimits limits, int threads = 1) {
    server_ = MakeBoundedHttpServer(threads, limits);
    server_->Get("/health", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("ok", "text/plain");
    });
    server_->Post("/echo", [](const httplib::Request& q, httplib::Response& r) {
      r.set_content(q.body, "text/plain");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }

  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  int Connect() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fds_.push_back(fd);
    return fd;
  }

  static bool Send(int fd, const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // Reads until the peer closes (true) or `timeout` passes (false); what came is in *got.
  static bool ReadUntilClosed(int fd, milliseconds timeout, std::string* got) {
    const auto deadline = Clock::now() + timeout;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return true;
      got->append(buf, static_cast<size_t>(n));
    }
  }

  // One request with "Connection: close" on a new connection: the response and its time.
  std::string Exchange(const std::string& request, milliseconds timeout, milliseconds* took) {
    const auto t0 = Clock::now();
    const int fd = Connect();
    EXPECT_TRUE(Send(fd, request));
    std::string got;
    EXPECT_TRUE(ReadUntilClosed(fd, timeout, &got))
        << "no complete answer within " << timeout.count() << " ms";
    *took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
    return got;
  }

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::vector<int> fds_;
};

constexpr char kHealth[] = "GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

TEST_F(BoundedHttpServerTest, HeadersSentAByteAtATimeAreCutAtTheDeadline) {
  HttpLimits l;
  l.header_timeout = milliseconds(300);
  Start(l);
  const int fd = Connect();
  const auto t0 = Clock::now();
  ASSERT_TRUE(Send(fd, "POST /echo HTTP/1.1\r\n"));
  // A header byte every 50 ms (each read alone is quick): the server must still give up.
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char c;
      closed = ::recv(fd, &c, 1, 0) <= 0;
      break;
    }
    if (!Send(fd, "x")) closed = true;
  }
  std::string rest;
  closed = closed || ReadUntilClosed(fd, milliseconds(2000), &rest);
  const auto held = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  EXPECT_TRUE(closed);
  EXPECT_GE(held.count(), 250);
  EXPECT_LT(held.count(), 2000);
  // The worker is free again.
  milliseconds took{};
  EXPECT_NE(Exchange(kHealth, milliseconds(2000), &took).find("200 OK"), std::string::npos);
}

TEST_F(BoundedHttpServerTest, HealthAnswersAndAFullQueueIs503WhileTheOnlyWorkerIsHeld) {
  HttpLimits l;
  l.max_queued = 0;
  l.header_timeout = milliseconds(10000);
  Start(l, /*threads=*/1);
  const int slow = Connect();  // takes the worker (accepted first) and never finishes its headers
  ASSERT_TRUE(Send(slow, "POST /echo HTTP/1.1\r\nHost: t\r\n"));
  milliseconds took{};
  const std::string busy =
      Exchange("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
               milliseconds(5000), &took);
  EXPECT_NE(busy.find("503 Service Unavailable"), std::string::npos) << busy;
  EXPECT_NE(busy.find("Retry-After: 1"), std::string::npos) << busy;
  EXPECT_NE(busy.find("\"overloaded\""), std::string::npos) << busy;
  EXPECT_LT(took.count(), 1000);
  const std::string health = Exchange(kHealth, milliseconds(5000), &took);
  EXPECT_NE(health.find("200 OK"), std::string::npos) << health;
  EXPECT_EQ(health.substr(health.size() - 2), "ok");
  EXPECT_LT(took.count(), 1000);
  // A path that only starts like /health is not served by the front lane.
  const std::string other = Exchange(
      "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", milliseconds(5000), &took);
  EXPECT_NE(other.find("503"), std::string::npos) << other;
}

TEST_F(BoundedHttpServerTest, IdleKeepAliveConnectionsAreClosed) {
  HttpLimits l;
  l.idle_timeout = milliseconds(200);
  Start(l);
  const int fd = Connect();
  const auto t0 = Clock::now();
  ASSERT_TRUE(Send(fd, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));  // keep-alive
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, milliseconds(3000), &got));
  const auto held = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  EXPECT_GE(held.count(), 150);
  EXPECT_LT(held.count(), 3000);
}

TEST_F(BoundedHttpServerTest, OversizedHeadersAreRefused) {
  Start(HttpLimits{});
  const int fd = Connect();
  std::string request = "GET /health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 2000; ++i)
    request += "X-Pad-" + std::to_string(i) + ": " + std::string(40, 'a') + "\r\n";
  request += "\r\n";
  Send(fd, request);  // the server may stop reading part way
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, milliseconds(5000), &got));
  EXPECT_EQ(got.find("200 OK"), std::string::npos) << got.substr(0, 200);
}

}  // namespace
}  // namespace colibri::router
