#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace voxd::server {
namespace {

bool valid_name(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// A sample value as Prometheus writes it: shortest round-trip decimal, +Inf, -Inf, NaN.
std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string escape(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} with `extra` (already formatted, e.g. le="0.5") appended; empty without labels.
std::string label_set(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra = {}) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + escape(values[i], true) + "\"";
  }
  if (!extra.empty()) out += (out.empty() ? "{" : ",") + extra;
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

void Counter::inc(double by) {
  if (!(by >= 0.0))
    throw Error("a counter can only go up; got an increment of " + format_value(by));
  value_.fetch_add(by, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw Error("histogram bounds must be finite and strictly ascending");
    }
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

const char* MetricsRegistry::type_name(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "metric";
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help,
                                  const Labels& labels) {
  return static_cast<Counter&>(get(Type::kCounter, name, help, labels, {}));
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  return static_cast<Gauge&>(get(Type::kGauge, name, help, labels, {}));
}

Histogram& MetricsRegistry::histogram(std::string_view name, std::string_view help,
                                      const std::vector<double>& bounds, const Labels& labels) {
  return static_cast<Histogram&>(get(Type::kHistogram, name, help, labels, bounds));
}

Metric& MetricsRegistry::get(Type type, std::string_view name, std::string_view help,
                             const Labels& labels, const std::vector<double>& bounds) {
  const std::string what = "metric '" + std::string(name) + "'";
  if (!valid_name(name, true)) throw Error(what + ": not a valid Prometheus metric name");
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (const auto& [label, value] : labels) {
    if (!valid_name(label, false) || label.starts_with("__") ||
        (type == Type::kHistogram && label == "le")) {
      throw Error(what + ": '" + label + "' is not a valid label name");
    }
    names.push_back(label);
    values.push_back(value);
  }

  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    Family family{type, std::string(help), names, bounds, {}};
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  Family& family = it->second;
  if (family.type != type) {
    throw Error(what + " is a " + type_name(family.type) + ", not a " + type_name(type));
  }
  if (family.label_names != names) throw Error(what + " is used with other label names");
  if (family.bounds != bounds) throw Error(what + " is used with other buckets");

  std::unique_ptr<Metric>& series = family.series[values];
  if (!series) {
    if (type == Type::kCounter) series = std::make_unique<Counter>();
    if (type == Type::kGauge) series = std::make_unique<Gauge>();
    if (type == Type::kHistogram) series = std::make_unique<Histogram>(bounds);
  }
  return *series;
}

std::string MetricsRegistry::render() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& [name, family] : families_) {
    out += "# HELP " + name + " " + escape(family.help, false) + "\n";
    out += "# TYPE " + name + " " + type_name(family.type) + "\n";
    for (const auto& [values, metric] : family.series) {
      if (family.type == Type::kCounter) {
        out += name + label_set(family.label_names, values) + " " +
               format_value(static_cast<const Counter&>(*metric).value()) + "\n";
      } else if (family.type == Type::kGauge) {
        out += name + label_set(family.label_names, values) + " " +
               format_value(static_cast<const Gauge&>(*metric).value()) + "\n";
      } else {
        const Histogram::Snapshot s = static_cast<const Histogram&>(*metric).snapshot();
        for (size_t i = 0; i < s.cumulative.size(); ++i) {
          const std::string le =
              i < family.bounds.size() ? format_value(family.bounds[i]) : std::string("+Inf");
          out += name + "_bucket" + label_set(family.label_names, values, "le=\"" + le + "\"") +
                 " " + std::to_string(s.cumulative[i]) + "\n";
        }
        out += name + "_sum" + label_set(family.label_names, values) + " " + format_value(s.sum) +
               "\n";
        out += name + "_count" + label_set(family.label_names, values) + " " +
               std::to_string(s.count) + "\n";
      }
    }
  }
  return out;
}

nlohmann::json MetricsRegistry::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  std::lock_guard lock(mutex_);
  for (const auto& [name, family] : families_) {
    nlohmann::json series = nlohmann::json::array();
    for (const auto& [values, metric] : family.series) {
      nlohmann::json labels = nlohmann::json::object();
      for (size_t i = 0; i < values.size(); ++i) labels[family.label_names[i]] = values[i];
      nlohmann::json one = {{"labels", std::move(labels)}};
      if (family.type == Type::kCounter) {
        one["value"] = static_cast<const Counter&>(*metric).value();
      } else if (family.type == Type::kGauge) {
        one["value"] = static_cast<const Gauge&>(*metric).value();
      } else {
        const Histogram::Snapshot s = static_cast<const Histogram&>(*metric).snapshot();
        one["count"] = s.count;
        one["sum"] = s.sum;
        one["bounds"] = family.bounds;
        one["cumulative"] = s.cumulative;
      }
      series.push_back(std::move(one));
    }
    out[name] = {{"type", type_name(family.type)}, {"help", family.help}, {"series", series}};
  }
  return out;
}

std::vector<double> default_latency_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
}

}  // namespace voxd::server
