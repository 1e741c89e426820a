#include "server/logging.h"

#include <spdlog/formatter.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "core/error.h"

namespace voxd::server {
namespace {

using json = nlohmann::ordered_json;

// The fields of the line being logged on this thread (spdlog formats on the caller's thread).
thread_local const json* t_fields = nullptr;

// RFC 3339 in UTC with microseconds: 2026-11-30T10:00:00.123456Z (a step's or a request's line
// placed against others to the microsecond, as bench/step_timeline.py does).
std::string utc_time(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() % 1000000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[96];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(micros));
  return text;
}

std::string_view level_name(spdlog::level::level_enum level) {
  const auto name = spdlog::level::to_string_view(level);
  return {name.data(), name.size()};
}

void append(spdlog::memory_buf_t& dest, std::string_view text) {
  dest.append(text.data(), text.data() + text.size());
}

// Whether a field's value is shown as it is: printable ASCII without spaces, quotes or '='.
bool plain(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return c > ' ' && c < 0x7f && c != '"' && c != '=';
  });
}

// `text` with its ASCII control bytes (a line break in an exception's message) written as \xNN.
std::string without_controls(std::string_view text) {
  std::string shown;
  shown.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      shown += escaped;
    } else {
      shown += c;
    }
  }
  return shown;
}

// "time level message key=value ...", values other than plain ASCII words quoted as in JSON
// (ASCII only).
class TextFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    append(dest, utc_time(msg.time));
    append(dest, " ");
    append(dest, level_name(msg.level));
    append(dest, " ");
    append(dest, without_controls(std::string_view(msg.payload.data(), msg.payload.size())));
    if (t_fields != nullptr) {
      for (const auto& [key, value] : t_fields->items()) {
        std::string shown;
        if (value.is_string() && plain(value.get_ref<const std::string&>())) {
          shown = value.get_ref<const std::string&>();
        } else {
          // Quoted as JSON, ASCII only: what a client sent (a path, an error quoting it) can
          // neither break the line nor reach a terminal as control bytes.
          shown = value.dump(-1, ' ', true, json::error_handler_t::replace);
        }
        append(dest, " " + key + "=" + shown);
      }
    }
    append(dest, "\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextFormatter>();
  }
};

// {"time", "level", "msg", fields...} on one line.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    json line = {{"time", utc_time(msg.time)},
                 {"level", level_name(msg.level)},
                 {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    if (t_fields != nullptr) {
      for (const auto& [key, value] : t_fields->items()) {
        if (!line.contains(key)) line[key] = value;
      }
    }
    append(dest, line.dump(-1, ' ', false, json::error_handler_t::replace));
    append(dest, "\n");
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

LogFormat parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  throw InputError("unknown log format '" + std::string(name) + "'; use text or json");
}

void configure_logging(LogFormat format) {
  if (format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else {
    spdlog::set_formatter(std::make_unique<TextFormatter>());
  }
}

void log_event(spdlog::level::level_enum level, std::string_view message, const json& fields) {
  if (!spdlog::should_log(level)) return;
  t_fields = fields.is_object() ? &fields : nullptr;
  spdlog::log(level, "{}", message);  // spdlog reports its own errors instead of throwing
  t_fields = nullptr;
}

}  // namespace voxd::server
