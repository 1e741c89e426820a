// The Prometheus text parser against MetricsRegistry::render() and hand-written text: samples,
// labels with escapes, special values, sums over series, histograms and their quantiles, and
// malformed lines.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/metrics.h"
#include "server/prometheus_text.h"

namespace voxd::server {
namespace {

TEST(PrometheusText, ReadsBackWhatTheRegistryRenders) {
  MetricsRegistry registry;
  registry.counter("voxd_requests_total", "Requests.", {{"outcome", "ok"}}).inc(7);
  registry.counter("voxd_requests_total", "Requests.", {{"outcome", "failed"}}).inc(2);
  registry.gauge("voxd_queue_depth", "Queue.").set(3.5);
  Histogram& h = registry.histogram("voxd_ttfa_seconds", "TTFA.", {0.1, 0.2, 0.4});
  for (double v : {0.05, 0.15, 0.15, 0.3, 1.0}) h.observe(v);

  const Scrape scrape = parse_prometheus_text(registry.render());
  EXPECT_EQ(scrape.types.at("voxd_requests_total"), "counter");
  EXPECT_EQ(scrape.types.at("voxd_ttfa_seconds"), "histogram");
  EXPECT_EQ(scrape.sum("voxd_requests_total"), 9.0);
  EXPECT_EQ(scrape.sum("voxd_requests_total", {{"outcome", "failed"}}), 2.0);
  EXPECT_EQ(scrape.sum("voxd_queue_depth"), 3.5);
  EXPECT_FALSE(scrape.sum("voxd_missing").has_value());
  EXPECT_FALSE(scrape.sum("voxd_requests_total", {{"outcome", "other"}}).has_value());

  const auto buckets = scrape.histogram("voxd_ttfa_seconds");
  ASSERT_TRUE(buckets.has_value());
  ASSERT_EQ(buckets->cumulative.size(), 4u);
  EXPECT_EQ(buckets->cumulative[0], std::make_pair(0.1, 1.0));
  EXPECT_EQ(buckets->cumulative[2], std::make_pair(0.4, 4.0));
  EXPECT_TRUE(std::isinf(buckets->cumulative[3].first));
  EXPECT_EQ(buckets->count, 5.0);
  EXPECT_NEAR(buckets->sum, 1.65, 1e-9);
}

TEST(PrometheusText, LabelsEscapesSpecialValuesAndTimestamps) {
  const Scrape scrape = parse_prometheus_text(
      "# HELP m A help line with {braces} and \"quotes\".\n"
      "# TYPE m gauge\n"
      "\n"
      "m{a=\"x\\\"y\",b=\"line\\nbreak\\\\\"} 1.5e3\n"
      "m{a=\"inf\"} +Inf\n"
      "m{a=\"nan\"} NaN 1700000000000\r\n"
      "n -2\n");
  ASSERT_EQ(scrape.samples.size(), 4u);
  const Labels expected = {{"a", "x\"y"}, {"b", "line\nbreak\\"}};
  EXPECT_EQ(scrape.samples[0].labels, expected);
  EXPECT_EQ(scrape.samples[0].value, 1500.0);
  EXPECT_EQ(scrape.samples[1].value, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(scrape.samples[2].value));
  EXPECT_EQ(scrape.sum("n"), -2.0);
  EXPECT_EQ(scrape.sum("m", {{"b", "line\nbreak\\"}}), 1500.0);
}

TEST(PrometheusText, MalformedLinesNameTheLine) {
  for (const char* text : {"m{a=\"x\" 1\n", "m{a=x} 1\n", "m 1x\n", "m\n", "{a=\"b\"} 1\n",
                           "m{a=\"\\q\"} 1\n", "ok 1\nm{a=\"open} 1\n"}) {
    SCOPED_TRACE(text);
    try {
      parse_prometheus_text(text);
      ADD_FAILURE() << "parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("line"), std::string::npos) << e.what();
    }
  }
}

TEST(PrometheusText, HistogramSumsSeriesThatMatch) {
  const Scrape scrape = parse_prometheus_text(
      "h_bucket{route=\"a\",le=\"1\"} 1\n"
      "h_bucket{route=\"a\",le=\"+Inf\"} 2\n"
      "h_sum{route=\"a\"} 3\n"
      "h_count{route=\"a\"} 2\n"
      "h_bucket{route=\"b\",le=\"1\"} 4\n"
      "h_bucket{route=\"b\",le=\"+Inf\"} 4\n"
      "h_sum{route=\"b\"} 2\n"
      "h_count{route=\"b\"} 4\n");
  const auto all = scrape.histogram("h");
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->cumulative[0].second, 5.0);
  EXPECT_EQ(all->count, 6.0);
  EXPECT_EQ(all->sum, 5.0);
  const auto b = scrape.histogram("h", {{"route", "b"}});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->count, 4.0);
  EXPECT_FALSE(scrape.histogram("h", {{"route", "c"}}).has_value());
  EXPECT_FALSE(scrape.histogram("missing").has_value());
}

TEST(PrometheusText, QuantilesInterpolateWithinBuckets) {
  Buckets buckets;
  buckets.cumulative = {
      {0.1, 10}, {0.2, 30}, {0.4, 40}, {std::numeric_limits<double>::infinity(), 40}};
  buckets.count = 40;
  // Rank 20 of 40 is halfway through the (0.1, 0.2] bucket's 20 observations.
  EXPECT_NEAR(*histogram_quantile(0.5, buckets), 0.15, 1e-12);
  // Rank 5 is halfway through the first bucket, taken to start at 0.
  EXPECT_NEAR(*histogram_quantile(0.125, buckets), 0.05, 1e-12);
  EXPECT_NEAR(*histogram_quantile(0.95, buckets), 0.2 + 0.2 * (38.0 - 30.0) / 10.0, 1e-12);
  // In the +Inf bucket: the largest finite bound.
  buckets.cumulative.back().second = 50;
  EXPECT_NEAR(*histogram_quantile(0.99, buckets), 0.4, 1e-12);
  Buckets empty;
  EXPECT_FALSE(histogram_quantile(0.5, empty).has_value());
  empty.cumulative = {{0.1, 0}, {std::numeric_limits<double>::infinity(), 0}};
  EXPECT_FALSE(histogram_quantile(0.5, empty).has_value());
}

TEST(PrometheusText, BucketsSinceAnEarlierScrape) {
  const double inf = std::numeric_limits<double>::infinity();
  Buckets earlier{{{0.1, 2}, {inf, 3}}, 0.5, 3};
  Buckets later{{{0.1, 2}, {inf, 7}}, 2.5, 7};
  const Buckets delta = buckets_since(later, earlier);
  EXPECT_EQ(delta.cumulative[0].second, 0.0);
  EXPECT_EQ(delta.cumulative[1].second, 4.0);
  EXPECT_EQ(delta.count, 4.0);
  EXPECT_EQ(delta.sum, 2.0);
  // A restarted server's counts went down: the later scrape alone.
  const Buckets restarted = buckets_since(earlier, later);
  EXPECT_EQ(restarted.count, 3.0);
}

}  // namespace
}  // namespace voxd::server
