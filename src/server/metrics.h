// A small thread-safe registry of Prometheus metrics — counters, gauges and histograms with
// labels — rendered in Prometheus's text exposition format (version 0.0.4) for GET /metrics.
// Metrics are created on first use and live as long as the registry; the references it hands
// out stay valid, and updating them takes no registry lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace voxd::server {

// Label names and values, in the order the family was first used with.
using Labels = std::vector<std::pair<std::string, std::string>>;

// The Content-Type of render()'s output.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

class Metric {
 public:
  virtual ~Metric() = default;
};

// A value that only goes up (requests served, audio seconds produced).
class Counter final : public Metric {
 public:
  // Adds `by`; throws voxd::Error when it is negative or NaN.
  void inc(double by = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, memory in use).
class Gauge final : public Metric {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (latencies, batch sizes), with their sum and count.
class Histogram final : public Metric {
 public:
  // `bounds`: the buckets' upper bounds, finite and strictly ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);

  // Counts `value` in the first bucket whose bound is >= it; NaN is ignored.
  void observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count)
    double sum = 0.0;
    uint64_t count = 0;
  };
  // A consistent copy of the counts.
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, the last one +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The series of `name` with `labels`, created (at 0) on first use; `help` is kept from the
  // family's first use. Throws voxd::Error when `name` or a label name is not a valid Prometheus
  // name, when `name` exists as another type or with other label names or buckets.
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help,
                       const std::vector<double>& bounds, const Labels& labels = {});

  // Every family in name order, each with # HELP and # TYPE lines, its series in label-value
  // order; histograms as _bucket{le=...} (cumulative, ending with le="+Inf"), _sum and _count.
  std::string render() const;

  // The same values as JSON, for a page that polls them: {name: {"type", "help", "series":
  // [{"labels": {name: value}, "value"}]}}; a histogram's series hold "count", "sum",
  // "bounds" (finite) and "cumulative" (one count per bound, then +Inf's).
  nlohmann::json to_json() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::vector<std::string> label_names;
    std::vector<double> bounds;
    std::map<std::vector<std::string>, std::unique_ptr<Metric>> series;
  };

  static const char* type_name(Type type);
  Metric& get(Type type, std::string_view name, std::string_view help, const Labels& labels,
              const std::vector<double>& bounds);

  mutable std::mutex mutex_;
  std::map<std::string, Family, std::less<>> families_;
};

// Prometheus's own buckets for latencies in seconds: 5 ms to 10 s.
std::vector<double> default_latency_buckets();

}  // namespace voxd::server
