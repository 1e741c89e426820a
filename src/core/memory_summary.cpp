#include "core/memory_summary.h"

#include <array>
#include <cstdio>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/error.h"

namespace voxd {
namespace {

// Every line of the table is this wide between its two outer bars, as in PyTorch.
constexpr size_t kWidth = 75;
constexpr uint64_t kNotTracked = UINT64_MAX;

using StatsField = std::pair<const char*, uint64_t AllocatorStats::*>;
constexpr std::array<StatsField, 29> kStatsFields = {{
    {"allocated_bytes", &AllocatorStats::allocated_bytes},
    {"reserved_bytes", &AllocatorStats::reserved_bytes},
    {"peak_allocated_bytes", &AllocatorStats::peak_allocated_bytes},
    {"peak_reserved_bytes", &AllocatorStats::peak_reserved_bytes},
    {"num_allocs", &AllocatorStats::num_allocs},
    {"num_frees", &AllocatorStats::num_frees},
    {"num_ooms", &AllocatorStats::num_ooms},
    {"requested_bytes", &AllocatorStats::requested_bytes},
    {"peak_requested_bytes", &AllocatorStats::peak_requested_bytes},
    {"active_bytes", &AllocatorStats::active_bytes},
    {"peak_active_bytes", &AllocatorStats::peak_active_bytes},
    {"inactive_split_bytes", &AllocatorStats::inactive_split_bytes},
    {"peak_inactive_split_bytes", &AllocatorStats::peak_inactive_split_bytes},
    {"total_allocated_bytes", &AllocatorStats::total_allocated_bytes},
    {"total_requested_bytes", &AllocatorStats::total_requested_bytes},
    {"total_reserved_bytes", &AllocatorStats::total_reserved_bytes},
    {"active_allocs", &AllocatorStats::active_allocs},
    {"peak_active_allocs", &AllocatorStats::peak_active_allocs},
    {"inactive_split_blocks", &AllocatorStats::inactive_split_blocks},
    {"peak_inactive_split_blocks", &AllocatorStats::peak_inactive_split_blocks},
    {"segments", &AllocatorStats::segments},
    {"peak_segments", &AllocatorStats::peak_segments},
    {"num_segment_reserves", &AllocatorStats::num_segment_reserves},
    {"num_segment_releases", &AllocatorStats::num_segment_releases},
    {"num_alloc_retries", &AllocatorStats::num_alloc_retries},
    {"blocks", &AllocatorStats::blocks},
    {"largest_free_block_bytes", &AllocatorStats::largest_free_block_bytes},
    {"limit_bytes", &AllocatorStats::limit_bytes},
    {"max_split_size", &AllocatorStats::max_split_size},
}};
static_assert(sizeof(AllocatorStats) == kStatsFields.size() * sizeof(uint64_t),
              "a field was added to AllocatorStats: list it in kStatsFields");

using BreakdownField = std::pair<const char*, uint64_t MemoryBreakdown::*>;
constexpr std::array<BreakdownField, 5> kBreakdownFields = {{
    {"weights", &MemoryBreakdown::weights},
    {"workspace", &MemoryBreakdown::workspace},
    {"cached", &MemoryBreakdown::cached},
    {"free", &MemoryBreakdown::free},
    {"total", &MemoryBreakdown::total},
}};
static_assert(sizeof(MemoryBreakdown) == kBreakdownFields.size() * sizeof(uint64_t),
              "a field was added to MemoryBreakdown: list it in kBreakdownFields");

template <typename T, size_t N>
void fields_from_json(const nlohmann::json& j, T& out,
                      const std::array<std::pair<const char*, uint64_t T::*>, N>& fields,
                      const char* what) {
  if (!j.is_object()) throw Error(std::string(what) + " JSON must be an object");
  for (const auto& [name, member] : fields) {
    const auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      throw Error(std::string(what) + " JSON: field \"" + name +
                  "\" is missing or not a non-negative integer");
    }
    out.*member = it->template get<uint64_t>();
  }
}

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

// " <name padded to 21> | <cell> | <cell> ... ": one row of the table.
std::string row_text(const std::string& name, std::initializer_list<std::string> cells) {
  std::string text = " ";
  text += pad(name, 21);
  for (const std::string& cell : cells) {
    text += " | ";
    text += cell;
  }
  text += ' ';
  return text;
}

std::string center(const std::string& text, size_t width) {
  if (text.size() >= width) return text;
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

// PyTorch's cell formats, 10 characters wide: a size in the largest binary unit that keeps it at
// 768 or more of that unit ("  2048 KiB"), a count in K/M from 750,000 up ("     12   ").
std::string size_cell(uint64_t bytes) {
  if (bytes == kNotTracked) return "       n/a";
  static constexpr std::array<const char*, 6> kUnits = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (unit + 1 < kUnits.size() && bytes >= 768 * 1024) {
    bytes /= 1024;
    ++unit;
  }
  char cell[32];
  std::snprintf(cell, sizeof(cell), "%6llu %s", static_cast<unsigned long long>(bytes),
                kUnits[unit]);
  return cell;
}

std::string count_cell(uint64_t count) {
  if (count == kNotTracked) return "       n/a";
  static constexpr std::array<char, 3> kUnits = {' ', 'K', 'M'};
  size_t unit = 0;
  while (unit + 1 < kUnits.size() && count >= 750 * 1000) {
    count /= 1000;
    ++unit;
  }
  char cell[32];
  std::snprintf(cell, sizeof(cell), "%7llu %c ", static_cast<unsigned long long>(count),
                kUnits[unit]);
  return cell;
}

struct Row {
  const char* name;
  uint64_t current, peak, allocated, freed;
  bool is_size;
};

// Tot Freed is what went away of Tot Alloc; allocators that do not keep the sum show n/a.
uint64_t freed(uint64_t total, uint64_t current) {
  return total >= current && total != 0 ? total - current : kNotTracked;
}
uint64_t tracked_total(uint64_t total, uint64_t current) {
  return total >= current && total != 0 ? total : kNotTracked;
}

std::string limit_text(uint64_t bytes) {
  return bytes == UINT64_MAX ? std::string("none") : format_bytes(bytes);
}

// `text` cut at spaces into lines of at most `width` characters (longer words stay whole).
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines(1);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!lines.back().empty() && lines.back().size() + 1 + word.size() > width)
      lines.emplace_back();
    if (!lines.back().empty()) lines.back() += ' ';
    lines.back() += word;
    start = end + 1;
  }
  return lines;
}

std::string percent_text(const std::optional<uint32_t>& percent) {
  return percent.has_value() ? std::to_string(*percent) + " %" : std::string("n/a");
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr std::array<const char*, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (unit + 1 < kUnits.size() && value >= 1024) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, kUnits[unit]);
  return text;
}

std::string memory_summary(const AllocatorStats& s, Device device,
                           const std::optional<MemoryBreakdown>& breakdown,
                           const std::optional<DeviceReading>& reading) {
  const std::string rule_double(kWidth, '=');
  const std::string rule(kWidth, '-');
  std::string out;
  const auto line = [&out](const std::string& text) {
    out += '|';
    out += pad(text, kWidth);
    out += "|\n";
  };
  const auto halves = [&line](const std::string& left, const std::string& right) {
    line(center(left, kWidth / 2) + "|" + center(right, kWidth - kWidth / 2 - 1));
  };

  line(rule_double);
  line(center("voxd memory summary, device " + device.to_string(), kWidth));
  line(rule);
  halves("OOMs: " + std::to_string(s.num_ooms),
         "alloc retries: " + std::to_string(s.num_alloc_retries));
  halves("limit: " + limit_text(s.limit_bytes), "max split size: " + limit_text(s.max_split_size));
  line(rule_double);
  line("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  // Active equals allocated in voxd (see AllocatorStats), so the active rows share its totals.
  const std::array<Row, 9> rows = {{
      {"Allocated memory", s.allocated_bytes, s.peak_allocated_bytes,
       tracked_total(s.total_allocated_bytes, s.allocated_bytes),
       freed(s.total_allocated_bytes, s.allocated_bytes), true},
      {"Active memory", s.active_bytes, s.peak_active_bytes,
       tracked_total(s.total_allocated_bytes, s.active_bytes),
       freed(s.total_allocated_bytes, s.active_bytes), true},
      {"Requested memory", s.requested_bytes, s.peak_requested_bytes,
       tracked_total(s.total_requested_bytes, s.requested_bytes),
       freed(s.total_requested_bytes, s.requested_bytes), true},
      {"GPU reserved memory", s.reserved_bytes, s.peak_reserved_bytes,
       tracked_total(s.total_reserved_bytes, s.reserved_bytes),
       freed(s.total_reserved_bytes, s.reserved_bytes), true},
      {"Non-releasable memory", s.inactive_split_bytes, s.peak_inactive_split_bytes, kNotTracked,
       kNotTracked, true},
      {"Allocations", s.active_allocs, s.peak_active_allocs, s.num_allocs, s.num_frees, false},
      {"Active allocs", s.active_allocs, s.peak_active_allocs, s.num_allocs, s.num_frees, false},
      {"GPU reserved segments", s.segments, s.peak_segments, s.num_segment_reserves,
       s.num_segment_releases, false},
      {"Non-releasable allocs", s.inactive_split_blocks, s.peak_inactive_split_blocks, kNotTracked,
       kNotTracked, false},
  }};
  for (const Row& row : rows) {
    const auto cell = row.is_size ? size_cell : count_cell;
    line(rule);
    line(row_text(row.name,
                  {cell(row.current), cell(row.peak), cell(row.allocated), cell(row.freed)}));
  }
  line(rule_double);
  line(" n/a: not tracked. Nor are PyTorch's per-pool rows (from large pool, from");
  line(" small pool) and its Oversize allocations and Oversize GPU segments rows.");
  line(rule_double);

  if (breakdown.has_value()) {
    const MemoryBreakdown& b = *breakdown;
    const uint64_t known = b.weights + b.workspace + b.cached + b.free;
    const auto share = [&b](uint64_t bytes) {
      if (b.total == 0) return std::string("n/a (device total unknown)");
      char text[32];
      std::snprintf(text, sizeof(text), "%5.1f %%",
                    100.0 * static_cast<double>(bytes) / static_cast<double>(b.total));
      return std::string(text);
    };
    const auto breakdown_row = [&](const char* name, uint64_t bytes) {
      line(row_text(name, {size_cell(bytes), share(bytes)}));
    };
    line("     Device memory     |   Bytes    | Share of total");
    line(rule);
    breakdown_row("Weights", b.weights);
    breakdown_row("Workspaces", b.workspace);
    breakdown_row("Allocator cache", b.cached);
    breakdown_row("Free", b.free);
    if (b.total > known) breakdown_row("Other", b.total - known);
    line(rule);
    breakdown_row("Total", b.total);
    line(rule_double);
  }

  if (reading.has_value()) {
    const DeviceReading& r = *reading;
    // The value column: what row_text leaves of the line after " <name> | " and before " ".
    constexpr size_t kValueWidth = kWidth - 26;
    const auto reading_row = [&](const std::string& name, const std::string& value) {
      const std::vector<std::string> lines = wrap(value, kValueWidth);
      for (size_t i = 0; i < lines.size(); ++i) {
        line(row_text(i == 0 ? name : std::string(), {lines[i]}));
      }
    };
    const std::string title = "Device (" + r.source + ")";
    if (r.available) {
      reading_row(title, r.name + ", driver " + r.driver_version);
      reading_row("Device memory used",
                  format_bytes(r.used_bytes) + " of " + format_bytes(r.total_bytes));
      reading_row("Utilisation", "GPU " + percent_text(r.gpu_utilization) + ", memory " +
                                     percent_text(r.memory_utilization));
    } else {
      reading_row(title, "unavailable: " + r.reason);
    }
    line(rule_double);
  }
  return out;
}

nlohmann::json memory_summary_json(const AllocatorStats& stats, Device device,
                                   const std::optional<MemoryBreakdown>& breakdown,
                                   const std::optional<DeviceReading>& reading) {
  nlohmann::json j = {{"device", device.to_string()}, {"stats", stats}};
  if (breakdown.has_value()) j["breakdown"] = *breakdown;
  if (reading.has_value()) j["device_reading"] = *reading;
  return j;
}

void to_json(nlohmann::json& j, const AllocatorStats& stats) {
  j = nlohmann::json::object();
  for (const auto& [name, member] : kStatsFields) j[name] = stats.*member;
}

void from_json(const nlohmann::json& j, AllocatorStats& stats) {
  fields_from_json(j, stats, kStatsFields, "memory stats");
}

void to_json(nlohmann::json& j, const MemoryBreakdown& breakdown) {
  j = nlohmann::json::object();
  for (const auto& [name, member] : kBreakdownFields) j[name] = breakdown.*member;
}

void from_json(const nlohmann::json& j, MemoryBreakdown& breakdown) {
  fields_from_json(j, breakdown, kBreakdownFields, "memory breakdown");
}

void to_json(nlohmann::json& j, const DeviceReading& reading) {
  j = {{"source", reading.source}, {"available", reading.available}};
  if (!reading.available) {
    j["reason"] = reading.reason;
    return;
  }
  const auto percent = [](const std::optional<uint32_t>& value) {
    return value.has_value() ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  j["name"] = reading.name;
  j["driver_version"] = reading.driver_version;
  j["used_bytes"] = reading.used_bytes;
  j["total_bytes"] = reading.total_bytes;
  j["gpu_utilization"] = percent(reading.gpu_utilization);
  j["memory_utilization"] = percent(reading.memory_utilization);
}

}  // namespace voxd
