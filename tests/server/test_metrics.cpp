// MetricsRegistry: the exact text rendering of a small registry, escaping, histogram buckets,
// misuse errors, and increments from many threads.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/metrics.h"

namespace voxd::server {
namespace {

TEST(Metrics, RendersASmallRegistryExactly) {
  MetricsRegistry registry;
  registry.counter("voxd_requests_total", "Requests by outcome.", {{"outcome", "ok"}}).inc(3);
  registry
      .counter("voxd_requests_total", "ignored: help comes from the first use",
               {{"outcome", "bad_request"}})
      .inc();
  registry.gauge("voxd_queue_depth", "Requests waiting.").set(2.5);
  Histogram& latency =
      registry.histogram("voxd_latency_seconds", "Latency.", {0.25, 0.5, 1}, {{"path", "/a"}});
  latency.observe(0.125);
  latency.observe(0.25);  // bounds are inclusive
  latency.observe(0.75);
  latency.observe(3.0);
  EXPECT_EQ(registry.render(),
            "# HELP voxd_latency_seconds Latency.\n"
            "# TYPE voxd_latency_seconds histogram\n"
            "voxd_latency_seconds_bucket{path=\"/a\",le=\"0.25\"} 2\n"
            "voxd_latency_seconds_bucket{path=\"/a\",le=\"0.5\"} 2\n"
            "voxd_latency_seconds_bucket{path=\"/a\",le=\"1\"} 3\n"
            "voxd_latency_seconds_bucket{path=\"/a\",le=\"+Inf\"} 4\n"
            "voxd_latency_seconds_sum{path=\"/a\"} 4.125\n"
            "voxd_latency_seconds_count{path=\"/a\"} 4\n"
            "# HELP voxd_queue_depth Requests waiting.\n"
            "# TYPE voxd_queue_depth gauge\n"
            "voxd_queue_depth 2.5\n"
            "# HELP voxd_requests_total Requests by outcome.\n"
            "# TYPE voxd_requests_total counter\n"
            "voxd_requests_total{outcome=\"bad_request\"} 1\n"
            "voxd_requests_total{outcome=\"ok\"} 3\n");
}

TEST(Metrics, JsonHoldsWhatTheTextShows) {
  MetricsRegistry registry;
  registry.counter("voxd_requests_total", "Requests by outcome.", {{"outcome", "ok"}}).inc(3);
  registry.gauge("voxd_queue_depth", "Requests waiting.").set(2.5);
  Histogram& latency =
      registry.histogram("voxd_latency_seconds", "Latency.", {0.25, 0.5}, {{"path", "/a"}});
  latency.observe(0.125);
  latency.observe(0.75);
  const nlohmann::json got = registry.to_json();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got["voxd_requests_total"]["type"], "counter");
  EXPECT_EQ(got["voxd_requests_total"]["help"], "Requests by outcome.");
  EXPECT_EQ(got["voxd_requests_total"]["series"],
            nlohmann::json::parse(R"([{"labels": {"outcome": "ok"}, "value": 3.0}])"));
  EXPECT_EQ(got["voxd_queue_depth"]["series"][0]["value"], 2.5);
  EXPECT_EQ(got["voxd_queue_depth"]["series"][0]["labels"], nlohmann::json::object());
  const nlohmann::json& histogram = got["voxd_latency_seconds"]["series"][0];
  EXPECT_EQ(got["voxd_latency_seconds"]["type"], "histogram");
  EXPECT_EQ(histogram["labels"]["path"], "/a");
  EXPECT_EQ(histogram["count"], 2);
  EXPECT_EQ(histogram["sum"], 0.875);
  EXPECT_EQ(histogram["bounds"], nlohmann::json::parse("[0.25, 0.5]"));
  EXPECT_EQ(histogram["cumulative"], nlohmann::json::parse("[1, 1, 2]"));
}

TEST(Metrics, EscapesHelpAndLabelValues) {
  MetricsRegistry registry;
  registry.gauge("g", "line one\nback\\slash \"quoted\"", {{"v", "a\"b\\c\nd"}}).set(1);
  EXPECT_EQ(registry.render(),
            "# HELP g line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE g gauge\n"
            "g{v=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Metrics, SpecialValuesUsePrometheusSpelling) {
  MetricsRegistry registry;
  registry.gauge("a", "h").set(std::numeric_limits<double>::infinity());
  registry.gauge("b", "h").set(-std::numeric_limits<double>::infinity());
  registry.gauge("c", "h").set(std::nan(""));
  registry.gauge("d", "h").set(1e-7);
  const std::string text = registry.render();
  EXPECT_NE(text.find("\na +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nb -Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nc NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nd 1e-07\n"), std::string::npos) << text;
}

TEST(Metrics, HistogramWithoutObservationsShowsZeros) {
  MetricsRegistry registry;
  registry.histogram("h", "help", {1});
  EXPECT_EQ(registry.render(),
            "# HELP h help\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\n"
            "h_sum 0\nh_count 0\n");
}

TEST(Metrics, SameNameAndLabelsGiveTheSameSeries) {
  MetricsRegistry registry;
  Counter& a = registry.counter("c_total", "h", {{"k", "v"}});
  Counter& b = registry.counter("c_total", "h", {{"k", "v"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &registry.counter("c_total", "h", {{"k", "w"}}));
}

TEST(Metrics, MisuseThrows) {
  MetricsRegistry registry;
  registry.counter("c_total", "h", {{"k", "v"}});
  EXPECT_THROW(registry.gauge("c_total", "h", {{"k", "v"}}), Error);        // another type
  EXPECT_THROW(registry.counter("c_total", "h", {{"other", "v"}}), Error);  // other labels
  EXPECT_THROW(registry.counter("c_total", "h"), Error);
  EXPECT_THROW(registry.counter("bad-name", "h"), Error);
  EXPECT_THROW(registry.counter("1abc", "h"), Error);
  EXPECT_THROW(registry.counter("ok", "h", {{"__reserved", "v"}}), Error);
  EXPECT_THROW(registry.histogram("h", "h", {1}, {{"le", "v"}}), Error);
  EXPECT_THROW(registry.histogram("h2", "h", {2, 1}), Error);
  registry.histogram("h3", "h", {1, 2});
  EXPECT_THROW(registry.histogram("h3", "h", {1, 3}), Error);  // other buckets
  EXPECT_THROW(registry.counter("c_total", "h", {{"k", "v"}}).inc(-1), Error);
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&registry, t] {
      for (int i = 0; i < kPerThread; ++i) {
        // Looking the series up each time also exercises the registry's lock.
        registry.counter("c_total", "h", {{"parity", t % 2 ? "odd" : "even"}}).inc();
        registry.gauge("g", "h").add(1);
        registry.histogram("h", "h", {0.5}).observe(i % 2 ? 1.0 : 0.0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(registry.counter("c_total", "h", {{"parity", "odd"}}).value(),
            kThreads / 2 * kPerThread);
  EXPECT_EQ(registry.counter("c_total", "h", {{"parity", "even"}}).value(),
            kThreads / 2 * kPerThread);
  EXPECT_EQ(registry.gauge("g", "h").value(), kThreads * kPerThread);
  const Histogram::Snapshot s = registry.histogram("h", "h", {0.5}).snapshot();
  EXPECT_EQ(s.count, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(s.cumulative[0], uint64_t{kThreads * kPerThread / 2});
  EXPECT_EQ(s.sum, kThreads * kPerThread / 2);
}

}  // namespace
}  // namespace voxd::server
