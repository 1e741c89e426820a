// voxd's log lines through spdlog, in one of two formats: text for people
// ("2026-11-30T10:00:00.123Z info request id=... status=200") or JSON for log collectors, one
// object per line: {"time", "level", "msg", and the line's fields}. Every spdlog call in the
// process follows the format chosen; log_event() adds fields to a line.
#pragma once

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <string_view>

namespace voxd::server {

enum class LogFormat { kText, kJson };

// "text" or "json"; throws voxd::InputError for anything else.
LogFormat parse_log_format(std::string_view name);

// Sets the default logger's format; lines logged from now on follow it.
void configure_logging(LogFormat format);

// One line at `level`: `message`, then `fields` (an object, in its order) as key=value pairs in
// text, or as members after "msg" in JSON. Does nothing when the level is disabled.
void log_event(spdlog::level::level_enum level, std::string_view message,
               const nlohmann::ordered_json& fields);

}  // namespace voxd::server
