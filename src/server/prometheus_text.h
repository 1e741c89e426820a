// Reads Prometheus's text exposition format (0.0.4, what GET /metrics answers) back into
// samples, and estimates quantiles from histogram buckets as Prometheus's histogram_quantile()
// does. `voxd monitor` uses it to show a server's load.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/metrics.h"

namespace voxd::server {

struct Sample {
  std::string name;  // with a histogram's suffix: name_bucket, name_sum, name_count
  Labels labels;     // in the order written
  double value = 0.0;
};

// A histogram's buckets summed over the series chosen: (upper bound, cumulative count) in
// ascending order of bound, the last one +Inf.
struct Buckets {
  std::vector<std::pair<double, double>> cumulative;
  double sum = 0.0;
  double count = 0.0;
};

class Scrape {
 public:
  std::vector<Sample> samples;
  std::map<std::string, std::string, std::less<>> types;  // family name -> "counter", ...

  // The sum of the values of `name`'s samples whose labels include every pair of `match`;
  // nothing when there is no such sample.
  std::optional<double> sum(std::string_view name, const Labels& match = {}) const;
  // The histogram `name` (its _bucket, _sum and _count samples) summed over the series whose
  // labels include `match`; nothing when it has no buckets.
  std::optional<Buckets> histogram(std::string_view name, const Labels& match = {}) const;
};

// Parses `text`; throws voxd::Error naming the line when a line is malformed.
Scrape parse_prometheus_text(std::string_view text);

// The `q`-quantile (0..1) of the observations counted in `buckets`, interpolated linearly within
// the bucket it falls in (the lower bound of the first bucket taken as 0); nothing when there
// are no observations. Falls in the +Inf bucket: the largest finite bound.
std::optional<double> histogram_quantile(double q, const Buckets& buckets);

// `later` minus `earlier` bucket by bucket (the observations between two scrapes); `later`
// alone when the bounds differ or a count went down (the server restarted).
Buckets buckets_since(const Buckets& later, const Buckets& earlier);

}  // namespace voxd::server
