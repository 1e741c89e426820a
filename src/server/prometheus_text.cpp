#include "server/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace voxd::server {
namespace {

bool name_char(char c, bool first) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return letter || (!first && c >= '0' && c <= '9');
}

[[noreturn]] void fail(size_t line_number, std::string_view line, const std::string& why) {
  const std::string shown(line.substr(0, 120));
  throw Error("metrics text line " + std::to_string(line_number) + ": " + why + ": " + shown);
}

double parse_value(std::string_view text, size_t line_number, std::string_view line) {
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) {
    fail(line_number, line, "bad value '" + std::string(text) + "'");
  }
  return value;
}

bool has_labels(const Labels& labels, const Labels& match) {
  return std::all_of(match.begin(), match.end(), [&](const auto& wanted) {
    return std::find(labels.begin(), labels.end(), wanted) != labels.end();
  });
}

// Parses `{name="value",...}` starting at line[pos] == '{'; returns the position after '}'.
size_t parse_labels(std::string_view line, size_t pos, Labels& labels, size_t line_number) {
  ++pos;
  for (;;) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos < line.size() && line[pos] == '}') return pos + 1;
    const size_t start = pos;
    while (pos < line.size() && name_char(line[pos], pos == start)) ++pos;
    if (pos == start) fail(line_number, line, "expected a label name");
    std::string name(line.substr(start, pos - start));
    if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
      fail(line_number, line, "expected =\" after label " + name);
    }
    pos += 2;
    std::string value;
    for (;;) {
      if (pos >= line.size()) fail(line_number, line, "unterminated label value");
      const char c = line[pos++];
      if (c == '"') break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos >= line.size()) fail(line_number, line, "unterminated escape");
      const char escaped = line[pos++];
      if (escaped == 'n') {
        value += '\n';
      } else if (escaped == '\\' || escaped == '"') {
        value += escaped;
      } else {
        fail(line_number, line, std::string("unknown escape \\") + escaped);
      }
    }
    labels.emplace_back(std::move(name), std::move(value));
    if (pos < line.size() && line[pos] == ',') {
      ++pos;
    } else if (pos >= line.size() || line[pos] != '}') {
      fail(line_number, line, "expected , or } after a label");
    }
  }
}

}  // namespace

Scrape parse_prometheus_text(std::string_view text) {
  Scrape scrape;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (line.front() == '#') {
      constexpr std::string_view kType = "# TYPE ";
      if (line.starts_with(kType)) {
        const std::string_view rest = line.substr(kType.size());
        const size_t space = rest.find(' ');
        if (space == std::string_view::npos) fail(line_number, line, "TYPE without a type");
        scrape.types.emplace(std::string(rest.substr(0, space)),
                             std::string(rest.substr(space + 1)));
      }
      continue;
    }
    Sample sample;
    size_t pos = 0;
    while (pos < line.size() && name_char(line[pos], pos == 0)) ++pos;
    if (pos == 0) fail(line_number, line, "expected a metric name");
    sample.name = std::string(line.substr(0, pos));
    if (pos < line.size() && line[pos] == '{') {
      pos = parse_labels(line, pos, sample.labels, line_number);
    }
    if (pos >= line.size() || (line[pos] != ' ' && line[pos] != '\t')) {
      fail(line_number, line, "expected a space before the value");
    }
    std::string_view rest = line.substr(pos);
    rest.remove_prefix(std::min(rest.find_first_not_of(" \t"), rest.size()));
    const size_t value_end = rest.find_first_of(" \t");
    sample.value = parse_value(rest.substr(0, value_end), line_number, line);
    if (value_end != std::string_view::npos) {  // an optional timestamp, in milliseconds
      std::string_view timestamp = rest.substr(value_end);
      timestamp.remove_prefix(std::min(timestamp.find_first_not_of(" \t"), timestamp.size()));
      if (!timestamp.empty()) parse_value(timestamp, line_number, line);
    }
    scrape.samples.push_back(std::move(sample));
  }
  return scrape;
}

std::optional<double> Scrape::sum(std::string_view name, const Labels& match) const {
  std::optional<double> total;
  for (const Sample& s : samples) {
    if (s.name == name && has_labels(s.labels, match)) total = total.value_or(0.0) + s.value;
  }
  return total;
}

std::optional<Buckets> Scrape::histogram(std::string_view name, const Labels& match) const {
  const std::string bucket_name = std::string(name) + "_bucket";
  std::map<double, double> cumulative;
  for (const Sample& s : samples) {
    if (s.name != bucket_name || !has_labels(s.labels, match)) continue;
    const auto le = std::find_if(s.labels.begin(), s.labels.end(),
                                 [](const auto& label) { return label.first == "le"; });
    if (le == s.labels.end()) continue;
    cumulative[parse_value(le->second, 0, le->second)] += s.value;
  }
  if (cumulative.empty()) return std::nullopt;
  Buckets buckets;
  buckets.cumulative.assign(cumulative.begin(), cumulative.end());
  buckets.sum = sum(std::string(name) + "_sum", match).value_or(0.0);
  buckets.count =
      sum(std::string(name) + "_count", match).value_or(buckets.cumulative.back().second);
  return buckets;
}

std::optional<double> histogram_quantile(double q, const Buckets& buckets) {
  if (buckets.cumulative.empty()) return std::nullopt;
  const double total = buckets.cumulative.back().second;
  if (!(total > 0)) return std::nullopt;
  const double rank = std::clamp(q, 0.0, 1.0) * total;
  double lower_bound = 0.0;
  double lower_count = 0.0;
  for (const auto& [bound, count] : buckets.cumulative) {
    if (count >= rank) {
      if (std::isinf(bound)) return lower_bound;
      if (count == lower_count) return bound;
      return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count);
    }
    lower_bound = bound;
    lower_count = count;
  }
  return lower_bound;
}

Buckets buckets_since(const Buckets& later, const Buckets& earlier) {
  if (later.cumulative.size() != earlier.cumulative.size()) return later;
  Buckets delta;
  for (size_t i = 0; i < later.cumulative.size(); ++i) {
    const auto& [bound, count] = later.cumulative[i];
    if (bound != earlier.cumulative[i].first || count < earlier.cumulative[i].second) return later;
    delta.cumulative.emplace_back(bound, count - earlier.cumulative[i].second);
  }
  delta.sum = later.sum - earlier.sum;
  delta.count = later.count - earlier.count;
  return delta;
}

}  // namespace voxd::server
