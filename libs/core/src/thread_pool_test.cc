#include "colibri/core/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace colibri {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 7, 100, 1001}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << n << " " << i;
  }
}

TEST(ThreadPool, ParallelForOnOneThreadRunsOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> hits(257, 0);
  std::atomic<int> elsewhere{0};
  pool.ParallelFor(
      257, 1,
      [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != caller) elsewhere++;
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      },
      /*max_threads=*/1);
  EXPECT_EQ(elsewhere.load(), 0);
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i], 1) << i;
  // Two of the four: at most two threads take part in a call.
  for (int round = 0; round < 20; ++round) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    pool.ParallelFor(
        64, 1,
        [&](int64_t b, int64_t e) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          std::lock_guard<std::mutex> lock(mu);
          ids.insert(std::this_thread::get_id());
        },
        /*max_threads=*/2);
    EXPECT_LE(ids.size(), 2u) << "round " << round;
  }
  // More than the pool has: the pool's size.
  std::fill(hits.begin(), hits.end(), 0);
  pool.ParallelFor(
      257, 1,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      },
      /*max_threads=*/16);
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i], 1) << i;
}

TEST(ThreadPool, SubmitRunsAllTasksBeforeDestruction) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(3);
    for (int i = 0; i < 50; ++i) pool.Submit([&] { count++; });
  }
  EXPECT_EQ(count.load(), 50);
}

TEST(ThreadPool, PhysicalCoresPositive) { EXPECT_GE(PhysicalCoreCount(), 1); }

TEST(ThreadPool, CountPhysicalCoresPairsSocketAndCore) {
  // Two sockets, two cores each, two threads per core: 4 physical cores.
  std::string text;
  int cpu = 0;
  for (int socket = 0; socket < 2; ++socket) {
    for (int thread = 0; thread < 2; ++thread) {
      for (int core = 0; core < 2; ++core) {
        text += "processor\t: " + std::to_string(cpu++) +
                "\nphysical id\t: " + std::to_string(socket) +
                "\ncore id\t\t: " + std::to_string(core) + "\n\n";
      }
    }
  }
  EXPECT_EQ(CountPhysicalCores(text), 4);
  EXPECT_EQ(CountPhysicalCores("processor : 0\nmodel name : x\n"),
            0);  // no core ids: caller falls back
  EXPECT_EQ(CountPhysicalCores(""), 0);
  // CPUs 0-3 are socket 0 (cores 0, 1, 0, 1), 4-7 socket 1: CPUs 0 and 2 are the two threads
  // of one core, 0 and 4 two cores; 8 names no processor.
  EXPECT_EQ(CountPhysicalCores(text, {0, 2}), 1);
  EXPECT_EQ(CountPhysicalCores(text, {0, 4}), 2);
  EXPECT_EQ(CountPhysicalCores(text, {0, 1, 2}), 2);
  EXPECT_EQ(CountPhysicalCores(text, {2, 3, 4, 5}), 4);
  EXPECT_EQ(CountPhysicalCores(text, {8}), 0);
}

TEST(ThreadPool, CgroupCpuQuotas) {
  EXPECT_EQ(CgroupV2CpuLimit("max 100000\n"), 0);
  EXPECT_DOUBLE_EQ(CgroupV2CpuLimit("200000 100000\n"), 2.0);
  EXPECT_DOUBLE_EQ(CgroupV2CpuLimit("150000 100000"), 1.5);
  for (const char* bad : {"", "garbage", "100000", "-1 100000", "100 0", "1x 100"})
    EXPECT_EQ(CgroupV2CpuLimit(bad), 0) << bad;
  EXPECT_EQ(CgroupV1CpuLimit("-1\n", "100000\n"), 0);
  EXPECT_DOUBLE_EQ(CgroupV1CpuLimit("50000\n", "100000\n"), 0.5);
  EXPECT_EQ(CgroupV1CpuLimit("", ""), 0);
  EXPECT_EQ(CgroupV2Path("12:cpu,cpuacct:/a\n0::/user.slice/app.scope\n"), "/user.slice/app.scope");
  EXPECT_EQ(CgroupV2Path("12:cpu,cpuacct:/a\n"), "");
}

TEST(ThreadPool, UsableCoresWithinAffinityAndHardware) {
  const int usable = UsableCoreCount();
  EXPECT_GE(usable, 1);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_LE(usable, CPU_COUNT(&mask));
  // Pinned to one CPU (a thread's own mask is what sched_getaffinity(0) reads), one core.
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(UsableCoreCount(), 1);
  });
  pinned.join();
}

}  // namespace
}  // namespace colibri

namespace colibri {
namespace {

// Many short ParallelFor calls from two threads at once, with the pool's workers also busy with
// Submit tasks: the pattern of a decode step while reader threads use the same machine. A helper
// touching a returned call's frame crashes or trips glibc's mutex assertions here.
TEST(ThreadPool, ParallelForCallsFinishCleanlyUnderContention) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int i = 0; i < 3000; ++i) {
      pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
    }
  };
  std::thread a(caller), b(caller);
  for (int i = 0; i < 200; ++i) pool.Submit([&] { total += 0; });
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 3000 * 64);
}

}  // namespace
}  // namespace colibri

namespace colibri {
namespace {

// A worker that is busy (here: a background task blocked on a latch; in production: a thread
// descheduled by another process) must not hold up a ParallelFor: the caller takes every chunk
// itself and returns. Before the close handshake this call waited for the blocked worker.
TEST(ThreadPool, ParallelForDoesNotWaitForAWorkerThatNeverStarts) {
  ThreadPool pool(2);  // one background worker
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, blocked = false;
  pool.Submit([&] {
    std::unique_lock<std::mutex> lock(mu);
    blocked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return blocked; });
  }
  for (int round = 0; round < 100; ++round) {
    std::vector<int> hits(1000, 0);
    pool.ParallelFor(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int v : hits) ASSERT_EQ(v, 1);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  // The 100 helper tasks queued behind the blocked one now start, find their calls closed and
  // return without touching the (gone) lambdas; the pool then still works.
  std::atomic<int64_t> total{0};
  pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 64);
}

}  // namespace
}  // namespace colibri
