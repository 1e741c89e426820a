#include "server/speech_request.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"
#include "server/api_error.h"
#include "server/audio_encoder.h"

namespace voxd::server {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 17> kKnownFields = {
    "model",         "input",        "voice",  "response_format", "speed",
    "stream_format", "instructions", "stream", "sample_rate",     "seed",
    "temperature",   "top_p",        "top_k",  "speaker",         "refine_text",
    "emotion",       "input_format"};

// Deeper JSON than any valid request has is refused while parsing, before it costs memory.
constexpr int kMaxJsonDepth = 16;
// Names and values quoted back in messages are cut to this many bytes.
constexpr size_t kMaxQuoted = 64;
// The bad token a JSON error quotes is cut to this many bytes, the whole message to kMaxMessage.
constexpr size_t kMaxQuotedToken = 40;
constexpr size_t kMaxMessage = 240;

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

// `text` cut to `limit` bytes at a character boundary, with "..." when cut.
std::string shown(std::string_view text, size_t limit = kMaxQuoted) {
  if (text.size() <= limit) return std::string(text);
  size_t end = limit;
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

// nlohmann's message without its "[json.exception...] " prefix, the token it quotes
// ("last read: '...'", "parsing '...'") cut to kMaxQuotedToken bytes and the whole to kMaxMessage:
// a 2 MB bad token must not come back as a 2 MB message.
std::string bounded_json_message(std::string what) {
  const size_t prefix = what.find("] ");
  if (prefix != std::string::npos) what.erase(0, prefix + 2);
  const size_t open = what.find('\'');
  size_t close = what.rfind("'; expected");
  if (close == std::string::npos || close <= open) close = what.rfind('\'');
  if (open != std::string::npos && close > open) {
    what = what.substr(0, open + 1) +
           shown(std::string_view(what).substr(open + 1, close - open - 1), kMaxQuotedToken) +
           what.substr(close);
  }
  return shown(what, kMaxMessage);
}

json parse_json(std::string_view body) {
  // The top-level field whose value is being parsed, to name it in errors; empty between fields.
  std::string field;
  const auto callback = [&field](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) {
      throw ApiError::invalid_request(
          "malformed request: JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
          std::nullopt, "invalid_json");
    }
    if (depth == 1) {
      if (event == json::parse_event_t::key) {
        field = parsed.get<std::string>();
      } else if (event != json::parse_event_t::object_start &&
                 event != json::parse_event_t::array_start) {
        field.clear();  // the field's value ended
      }
    }
    return true;
  };
  try {
    return json::parse(body, callback);
  } catch (const json::parse_error& e) {
    const std::string where = field.empty() ? "" : " (in '" + shown(field) + "')";
    throw ApiError::invalid_request(
        "malformed JSON in the request body" + where + ": " + bounded_json_message(e.what()),
        std::nullopt, "invalid_json");
  } catch (const json::exception& e) {
    // A value JSON allows but the parser cannot hold: 1e400, a number beyond a double's range.
    std::optional<std::string> param;
    if (!field.empty()) param = shown(field);
    throw ApiError::invalid_request(
        (param ? "'" + *param + "' cannot be read: " : "the request body cannot be read: ") +
            bounded_json_message(e.what()),
        param, "invalid_value");
  }
}

size_t count_code_points(std::string_view text) {
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++chars) next_code_point(text, i);
  return chars;
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

// The formats this build encodes, for messages: "mp3, opus, aac, flac, wav or pcm".
std::string encodable_formats() {
  std::vector<std::string_view> names;
  for (AudioFormat format : kAudioFormats) {
    if (!missing_codec_library(format)) names.push_back(format_name(format));
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// `voice` as OpenAI's SDKs send it: a name, or {"id": name}.
std::string voice_field(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object()) throw wrong_type("voice", "a string or an object {\"id\": ...}", value);
  for (const auto& [key, unused] : value.items()) {
    if (key != "id") {
      throw ApiError::invalid_request(
          "Unrecognized argument in 'voice': '" + shown(key) + "' (voice takes only 'id')", "voice",
          "unknown_parameter");
    }
  }
  const json* id = optional_field(value, "id");
  if (id == nullptr) {
    throw ApiError::invalid_request("Missing required parameter: 'voice.id'.", "voice",
                                    "missing_required_parameter");
  }
  if (!id->is_string()) {
    throw ApiError::invalid_request("'voice.id' must be a string, got " + type_name(*id), "voice",
                                    "invalid_type");
  }
  return id->get<std::string>();
}

// The served voice `name` stands for: itself, or the voice it is an alias of.
std::string resolve_voice(const std::string& name, const SpeechPolicy& policy) {
  if (contains(policy.voices, name)) return name;
  const auto alias = policy.voice_aliases.find(name);
  if (alias != policy.voice_aliases.end() && contains(policy.voices, alias->second)) {
    return alias->second;
  }
  std::vector<std::string> names = policy.voices;
  for (const auto& [alias_name, voice] : policy.voice_aliases) names.push_back(alias_name);
  throw ApiError::invalid_request(
      "voice '" + shown(name) + "' is not available; available: " + join(names), "voice",
      "invalid_value");
}

// voxd's `sample_rate` for `format`: "native" (nullopt) or one of kSampleRates.
std::optional<int64_t> sample_rate_field(const json& value, AudioFormat format) {
  if (format != AudioFormat::kPcm && format != AudioFormat::kWav) {
    throw ApiError::invalid_request(
        "'sample_rate' applies to pcm and wav only, not " + std::string(format_name(format)),
        "sample_rate", "unsupported_value");
  }
  std::string expected = "\"native\" or a rate in Hz: ";
  const size_t rates = std::size(kSampleRates);
  for (size_t i = 0; i < rates; ++i) {
    expected += (i == 0 ? "" : i + 1 == rates ? " or " : ", ") + std::to_string(kSampleRates[i]);
  }
  if (value.is_string()) {
    if (value.get<std::string>() == "native") return std::nullopt;
    throw ApiError::invalid_request(
        "'sample_rate' must be " + expected + ", got '" + shown(value.get<std::string>()) + "'",
        "sample_rate", "invalid_value");
  }
  if (!value.is_number_integer()) throw wrong_type("sample_rate", expected.c_str(), value);
  for (int64_t rate : kSampleRates) {
    if (value == rate) return rate;
  }
  throw ApiError::invalid_request("'sample_rate' must be " + expected + ", got " + value.dump(),
                                  "sample_rate", "invalid_value");
}

// A JSON integer from `min` to `max` (a number written with a fraction or an exponent, 3.0 or
// 1e3, is not one).
uint64_t integer_field(const json& value, const std::string& field, uint64_t min, uint64_t max) {
  const std::string expected =
      "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!value.is_number_integer()) throw wrong_type(field, expected.c_str(), value);
  // The parser keeps every integer that is not negative as unsigned.
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    if (number >= min && number <= max) return number;
  }
  throw ApiError::invalid_request("'" + field + "' must be " + expected + ", got " + value.dump(),
                                  field, "invalid_value");
}

// A number greater than 0 and at most `max`.
double positive_number_field(const json& value, const std::string& field, double max) {
  if (!value.is_number()) throw wrong_type(field, "a number", value);
  const double number = value.get<double>();
  if (!(number > 0 && number <= max)) {
    throw ApiError::invalid_request("'" + field + "' must be greater than 0 and at most " +
                                        json(max).dump() + ", got " + value.dump(),
                                    field, "invalid_value");
  }
  return number;
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
  request.voice = voice_field(required_field(parsed, "voice"));

  if (const json* value = optional_field(parsed, "response_format")) {
    const std::string name = string_field(*value, "response_format");
    const std::optional<AudioFormat> format = parse_audio_format(name);
    if (!format) {
      throw ApiError::invalid_request(
          "response_format '" + shown(name) + "' is not supported; use " + encodable_formats(),
          "response_format", "unsupported_format");
    }
    if (const std::optional<std::string_view> library = missing_codec_library(*format)) {
      throw ApiError::invalid_request("response_format '" + name +
                                          "' is not supported: this server was built without " +
                                          std::string(*library) + "; " + name +
                                          " is not available (use " + encodable_formats() + ")",
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
      request.stream_format = StreamFormat::kSse;
    } else if (name != "audio") {
      throw ApiError::invalid_request(
          "stream_format '" + shown(name) + "' is not valid; use 'audio' or 'sse'", "stream_format",
          "invalid_value");
    }
  }
  if (const json* value = optional_field(parsed, "instructions")) {
    request.instructions = string_field(*value, "instructions");
    const size_t chars = count_code_points(request.instructions);
    if (chars > kMaxInstructionsChars) {
      throw ApiError::invalid_request("'instructions' is " + std::to_string(chars) +
                                          " characters long; the limit is " +
                                          std::to_string(kMaxInstructionsChars),
                                      "instructions", "invalid_value");
    }
  }
  if (const json* value = optional_field(parsed, "stream")) {
    if (!value->is_boolean()) throw wrong_type("stream", "a boolean", *value);
    request.stream = value->get<bool>();
  }
  if (request.stream_format == StreamFormat::kSse && !request.stream) {
    throw ApiError::invalid_request(
        "stream_format 'sse' streams events as the audio is made; it cannot be combined with "
        "\"stream\": false (leave one of them out)",
        "stream_format", "unsupported_value");
  }
  if (request.response_format == AudioFormat::kPcm) request.sample_rate = kOpenAiPcmRate;
  if (const json* value = optional_field(parsed, "sample_rate")) {
    request.sample_rate = sample_rate_field(*value, request.response_format);
  }
  if (const json* value = optional_field(parsed, "seed")) {
    request.seed = integer_field(*value, "seed", 0, std::numeric_limits<uint64_t>::max());
  }
  if (const json* value = optional_field(parsed, "temperature")) {
    request.temperature = positive_number_field(*value, "temperature", kMaxTemperature);
  }
  if (const json* value = optional_field(parsed, "top_p")) {
    request.top_p = positive_number_field(*value, "top_p", 1.0);
  }
  if (const json* value = optional_field(parsed, "top_k")) {
    request.top_k = static_cast<int64_t>(integer_field(*value, "top_k", 1, kMaxTopK));
  }
  if (const json* value = optional_field(parsed, "speaker")) {
    request.speaker = string_field(*value, "speaker");
    if (request.speaker->empty()) {
      throw ApiError::invalid_request("'speaker' is empty", "speaker", "invalid_value");
    }
    if (request.speaker->size() > kMaxSpeakerBytes) {
      throw ApiError::invalid_request("'speaker' is " + std::to_string(request.speaker->size()) +
                                          " bytes long; the limit is " +
                                          std::to_string(kMaxSpeakerBytes),
                                      "speaker", "invalid_value");
    }
  }
  if (const json* value = optional_field(parsed, "refine_text")) {
    if (!value->is_boolean()) throw wrong_type("refine_text", "a boolean", *value);
    request.refine_text = value->get<bool>();
  }
  if (const json* value = optional_field(parsed, "emotion")) {
    request.emotion = string_field(*value, "emotion");
    if (request.emotion->empty() || request.emotion->size() > kMaxEmotionBytes) {
      throw ApiError::invalid_request(
          "'emotion' must be a name of 1 to " + std::to_string(kMaxEmotionBytes) + " bytes",
          "emotion", "invalid_value");
    }
  }
  if (const json* value = optional_field(parsed, "input_format")) {
    const std::string name = string_field(*value, "input_format");
    if (name == "kantts_symbols") {
      request.input_format = InputFormat::kKanTtsSymbols;
    } else if (name != "text") {
      throw ApiError::invalid_request(
          "input_format '" + shown(name) + "' is not valid; use 'text' or 'kantts_symbols'",
          "input_format", "invalid_value");
    }
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
  request.voice = resolve_voice(request.voice, policy);
  return request;
}

std::map<std::string, std::string> parse_voice_aliases(const std::vector<std::string>& entries,
                                                       const std::vector<std::string>& voices) {
  std::map<std::string, std::string> aliases;
  for (const std::string& entry : entries) {
    const size_t equals = entry.find('=');
    const std::string alias = entry.substr(0, equals);
    const std::string voice = equals == std::string::npos ? "" : entry.substr(equals + 1);
    if (alias.empty() || voice.empty()) {
      throw InputError("--voice-alias '" + entry +
                       "' must be ALIAS=VOICE, e.g. --voice-alias alloy=en-demo");
    }
    if (contains(voices, alias)) {
      throw InputError("--voice-alias '" + entry + "': '" + alias +
                       "' is already a voice's name; choose another alias");
    }
    if (!contains(voices, voice)) {
      throw InputError("--voice-alias '" + entry + "': no voice '" + voice +
                       "' is served; served: " + join(voices));
    }
    if (!aliases.emplace(alias, voice).second) {
      throw InputError("--voice-alias '" + entry + "': the alias '" + alias +
                       "' is given twice (as " + alias + "=" + aliases[alias] + " too)");
    }
  }
  return aliases;
}

}  // namespace voxd::server
