#include "server/speech_request.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"

namespace voxd::server {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 8> kKnownFields = {
    "model", "input",         "voice",        "response_format",
    "speed", "stream_format", "instructions", "stream"};

// Deeper JSON than any valid request has is refused while parsing, before it costs memory.
constexpr int kMaxJsonDepth = 16;
// Names and values quoted back in messages are cut to this many bytes.
constexpr size_t kMaxQuoted = 64;

// Decodes the code point starting at text[i] (valid UTF-8 assumed) and advances i past it.
uint32_t next_code_point(std::string_view text, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    const uint32_t cp = (uint32_t{b0} & 0x1F) << 6 | (byte(i + 1) & 0x3F);
    i += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    const uint32_t cp =
        (uint32_t{b0} & 0x0F) << 12 | (uint32_t{byte(i + 1)} & 0x3F) << 6 | (byte(i + 2) & 0x3F);
    i += 3;
    return cp;
  }
  const uint32_t cp = (uint32_t{b0} & 0x07) << 18 | (uint32_t{byte(i + 1)} & 0x3F) << 12 |
                      (uint32_t{byte(i + 2)} & 0x3F) << 6 | (byte(i + 3) & 0x3F);
  i += 4;
  return cp;
}

// White space in Unicode's sense (White_Space property) plus the zero-width space and BOM.
bool is_space(uint32_t cp) {
  if (cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || cp == 0x85 || cp == 0xA0) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200B) || cp == 0x2028 || cp == 0x2029) return true;
  return cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

// `text` cut to kMaxQuoted bytes at a character boundary, with "..." when cut.
std::string shown(std::string_view text) {
  if (text.size() <= kMaxQuoted) return std::string(text);
  size_t end = kMaxQuoted;
  while (end > 0 && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "...";
}

std::string join(const std::vector<std::string>& names) {
  constexpr size_t kMaxListed = 20;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kMaxListed; ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  if (names.size() > kMaxListed) out += ", ...";
  return out.empty() ? "none" : out;
}

std::string type_name(const json& value) {
  if (value.is_number()) return "number";
  return value.type_name();
}

ApiError wrong_type(const std::string& field, const char* expected, const json& value) {
  return ApiError::invalid_request(
      "'" + field + "' must be " + expected + ", got " + type_name(value), field, "invalid_type");
}

// The field's value when present and not null.
const json* optional_field(const json& body, const std::string& field) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& required_field(const json& body, const std::string& field) {
  const json* value = optional_field(body, field);
  if (value == nullptr) {
    throw ApiError::invalid_request("Missing required parameter: '" + field + "'.", field,
                                    "missing_required_parameter");
  }
  return *value;
}

std::string string_field(const json& value, const std::string& field) {
  if (!value.is_string()) throw wrong_type(field, "a string", value);
  return value.get<std::string>();
}

json parse_json(std::string_view body) {
  const auto limit_depth = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) {
      throw ApiError::invalid_request(
          "malformed request: JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
          std::nullopt, "invalid_json");
    }
    return true;
  };
  try {
    return json::parse(body, limit_depth);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const size_t prefix = what.find("] ");
    if (prefix != std::string::npos) what.erase(0, prefix + 2);
    throw ApiError::invalid_request("malformed JSON in the request body: " + what, std::nullopt,
                                    "invalid_json");
  }
}

void check_input(const std::string& input, size_t max_chars) {
  size_t chars = 0;
  bool blank = true;
  for (size_t i = 0; i < input.size();) {
    const uint32_t cp = next_code_point(input, i);
    if (cp == 0) {
      throw ApiError::invalid_request("'input' contains a NUL character (U+0000)", "input",
                                      "invalid_value");
    }
    blank = blank && is_space(cp);
    ++chars;
  }
  if (blank) {
    throw ApiError::invalid_request(
        input.empty() ? "'input' is empty" : "'input' holds only white space", "input",
        "empty_input");
  }
  if (chars > max_chars) {
    ApiError error = ApiError::invalid_request(
        "'input' is " + std::to_string(chars) + " characters long; the limit is " +
            std::to_string(max_chars) + " (split the text over several requests)",
        "input", "input_too_long");
    error.status = 413;
    throw error;
  }
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint8_t lo = 0x80;  // bounds of the second byte, which exclude overlong forms, surrogates
    uint8_t hi = 0xBF;  // and code points above U+10FFFF
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      length = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      length = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      length = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      const auto b = static_cast<uint8_t>(text[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

SpeechRequest parse_speech_request(std::string_view body, const SpeechPolicy& policy) {
  const size_t bad = find_invalid_utf8(body);
  if (bad != std::string_view::npos) {
    throw ApiError::invalid_request(
        "the request body is not valid UTF-8 (bad byte at offset " + std::to_string(bad) + ")",
        std::nullopt, "invalid_utf8");
  }
  const json parsed = parse_json(body);
  if (!parsed.is_object()) {
    throw ApiError::invalid_request(
        "the request body must be a JSON object, got " + type_name(parsed), std::nullopt,
        "invalid_json");
  }
  for (const auto& [key, value] : parsed.items()) {
    if (std::find(kKnownFields.begin(), kKnownFields.end(), key) == kKnownFields.end()) {
      throw ApiError::invalid_request(
          "Unrecognized request argument supplied: '" + shown(key) + "'", shown(key),
          "unknown_parameter");
    }
  }

  SpeechRequest request;
  request.model = string_field(required_field(parsed, "model"), "model");
  request.input = string_field(required_field(parsed, "input"), "input");
  request.voice = string_field(required_field(parsed, "voice"), "voice");

  if (const json* value = optional_field(parsed, "response_format")) {
    const std::string name = string_field(*value, "response_format");
    const std::optional<AudioFormat> format = parse_audio_format(name);
    if (!format) {
      throw ApiError::invalid_request(
          "response_format '" + shown(name) + "' is not supported; use mp3, opus, flac, wav or pcm",
          "response_format", "unsupported_format");
    }
    request.response_format = *format;
  }
  if (const json* value = optional_field(parsed, "speed")) {
    if (!value->is_number()) throw wrong_type("speed", "a number", *value);
    const double speed = value->get<double>();
    if (!(speed >= kMinSpeed && speed <= kMaxSpeed)) {
      throw ApiError::invalid_request("'speed' must be between 0.25 and 4.0, got " + value->dump(),
                                      "speed", "invalid_value");
    }
    request.speed = static_cast<float>(speed);
  }
  if (const json* value = optional_field(parsed, "stream_format")) {
    const std::string name = string_field(*value, "stream_format");
    if (name == "sse") {
      throw ApiError::invalid_request(
          "stream_format 'sse' is not supported by voxd yet; use 'audio' (the default), which "
          "streams the audio bytes with chunked transfer encoding",
          "stream_format", "unsupported_value");
    }
    if (name != "audio") {
      throw ApiError::invalid_request(
          "stream_format '" + shown(name) + "' is not valid; use 'audio'", "stream_format",
          "invalid_value");
    }
  }
  if (const json* value = optional_field(parsed, "instructions")) {
    if (!string_field(*value, "instructions").empty()) {
      throw ApiError::invalid_request(
          "voxd's voices do not take 'instructions'; leave it out (the speaking rate is set "
          "with 'speed')",
          "instructions", "unsupported_value");
    }
  }
  if (const json* value = optional_field(parsed, "stream")) {
    if (!value->is_boolean()) throw wrong_type("stream", "a boolean", *value);
    request.stream = value->get<bool>();
  }

  if (!contains(policy.models, request.model)) {
    ApiError error =
        ApiError::invalid_request("The model '" + shown(request.model) +
                                      "' does not exist; available: " + join(policy.models),
                                  "model", "model_not_found");
    error.status = 404;
    throw error;
  }
  check_input(request.input, policy.max_input_chars);
  if (!contains(policy.voices, request.voice)) {
    throw ApiError::invalid_request(
        "voice '" + shown(request.voice) + "' is not available; available: " + join(policy.voices),
        "voice", "invalid_value");
  }
  return request;
}

}  // namespace voxd::server
