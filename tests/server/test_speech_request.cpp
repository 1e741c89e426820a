// parse_speech_request: defaults, every field's checks and the OpenAI-style error each gives.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/speech_request.h"

namespace voxd::server {
namespace {

using nlohmann::json;

SpeechPolicy policy() {
  SpeechPolicy p;
  p.models = {"tts-1", "voxd"};
  p.voices = {"en-demo", "alloy"};
  p.max_input_chars = 20;
  return p;
}

json valid() {
  return {{"model", "tts-1"}, {"input", "Hello there."}, {"voice", "en-demo"}};
}

// The ApiError parse_speech_request throws for `body`; fails the test when it does not throw.
ApiError error_for(const std::string& body) {
  try {
    parse_speech_request(body, policy());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << body;
  return {};
}

ApiError error_for(const json& body) {
  return error_for(body.dump());
}

json with(const std::string& field, const json& value) {
  json body = valid();
  body[field] = value;
  return body;
}

json without(const std::string& field) {
  json body = valid();
  body.erase(field);
  return body;
}

TEST(SpeechRequest, ValidRequestGetsOpenAIDefaults) {
  const SpeechRequest r = parse_speech_request(valid().dump(), policy());
  EXPECT_EQ(r.model, "tts-1");
  EXPECT_EQ(r.input, "Hello there.");
  EXPECT_EQ(r.voice, "en-demo");
  EXPECT_EQ(r.response_format, AudioFormat::kMp3);
  EXPECT_FLOAT_EQ(r.speed, 1.0f);
  EXPECT_TRUE(r.stream);
}

TEST(SpeechRequest, EveryFieldIsRead) {
  json body = valid();
  body["response_format"] = "flac";
  body["speed"] = 2.5;
  body["stream_format"] = "audio";
  body["instructions"] = "";
  body["stream"] = false;
  const SpeechRequest r = parse_speech_request(body.dump(), policy());
  EXPECT_EQ(r.response_format, AudioFormat::kFlac);
  EXPECT_FLOAT_EQ(r.speed, 2.5f);
  EXPECT_FALSE(r.stream);
  for (const char* name : {"mp3", "opus", "flac", "wav", "pcm"}) {
    EXPECT_EQ(
        format_name(
            parse_speech_request(with("response_format", name).dump(), policy()).response_format),
        name);
  }
}

TEST(SpeechRequest, NullOptionalFieldsTakeTheirDefaults) {
  json body = valid();
  body["speed"] = nullptr;
  body["response_format"] = nullptr;
  const SpeechRequest r = parse_speech_request(body.dump(), policy());
  EXPECT_FLOAT_EQ(r.speed, 1.0f);
  EXPECT_EQ(r.response_format, AudioFormat::kMp3);
}

TEST(SpeechRequest, SpeedLimitsAreInclusiveAndIntegersAreNumbers) {
  EXPECT_FLOAT_EQ(parse_speech_request(with("speed", 0.25).dump(), policy()).speed, 0.25f);
  EXPECT_FLOAT_EQ(parse_speech_request(with("speed", 4).dump(), policy()).speed, 4.0f);
}

TEST(SpeechRequest, InputLimitCountsCharactersNotBytes) {
  // 20 characters of two and three bytes each: at the limit.
  const std::string twenty = "ééééééééééééééé€€€€€";
  EXPECT_EQ(parse_speech_request(with("input", twenty).dump(), policy()).input, twenty);
  const ApiError e = error_for(with("input", twenty + "x"));
  EXPECT_EQ(e.status, 413);
  EXPECT_EQ(e.param, "input");
  EXPECT_EQ(e.code, "input_too_long");
  EXPECT_NE(e.message.find("21 characters"), std::string::npos) << e.message;
}

struct BadCase {
  const char* name;
  std::string body;
  int status;
  std::optional<std::string> param;
  std::string code;
};

TEST(SpeechRequest, BadRequestsGetTheRightError) {
  const std::vector<BadCase> cases = {
      {"malformed JSON", R"({"model": "tts-1", "input": )", 400, std::nullopt, "invalid_json"},
      {"not an object", R"(["tts-1"])", 400, std::nullopt, "invalid_json"},
      {"empty body", "", 400, std::nullopt, "invalid_json"},
      {"too deep", std::string(40, '[') + std::string(40, ']'), 400, std::nullopt, "invalid_json"},
      {"invalid UTF-8", "{\"model\": \"tts-1\", \"input\": \"caf\xC3\", \"voice\": \"alloy\"}", 400,
       std::nullopt, "invalid_utf8"},
      {"lone surrogate escape", R"({"model": "tts-1", "input": "\ud800", "voice": "alloy"})", 400,
       std::nullopt, "invalid_json"},
      {"unknown field", with("temperature", 0.5).dump(), 400, "temperature", "unknown_parameter"},
      {"missing input", without("input").dump(), 400, "input", "missing_required_parameter"},
      {"null input", with("input", nullptr).dump(), 400, "input", "missing_required_parameter"},
      {"missing model", without("model").dump(), 400, "model", "missing_required_parameter"},
      {"missing voice", without("voice").dump(), 400, "voice", "missing_required_parameter"},
      {"input not a string", with("input", 42).dump(), 400, "input", "invalid_type"},
      {"model not a string", with("model", json::array()).dump(), 400, "model", "invalid_type"},
      {"speed a string", with("speed", "fast").dump(), 400, "speed", "invalid_type"},
      {"stream not a boolean", with("stream", "yes").dump(), 400, "stream", "invalid_type"},
      {"empty input", with("input", "").dump(), 400, "input", "empty_input"},
      {"white space input", with("input", " \t\n\u00a0\u3000").dump(), 400, "input", "empty_input"},
      {"NUL in input", with("input", std::string("a\0b", 3)).dump(), 400, "input", "invalid_value"},
      {"unknown model", with("model", "tts-2").dump(), 404, "model", "model_not_found"},
      {"unknown voice", with("voice", "nova").dump(), 400, "voice", "invalid_value"},
      {"voice as a path", with("voice", "../voices/en-demo").dump(), 400, "voice", "invalid_value"},
      {"aac", with("response_format", "aac").dump(), 400, "response_format", "unsupported_format"},
      {"format in capitals", with("response_format", "MP3").dump(), 400, "response_format",
       "unsupported_format"},
      {"speed too low", with("speed", 0.2).dump(), 400, "speed", "invalid_value"},
      {"speed too high", with("speed", 4.01).dump(), 400, "speed", "invalid_value"},
      {"sse", with("stream_format", "sse").dump(), 400, "stream_format", "unsupported_value"},
      {"bad stream_format", with("stream_format", "video").dump(), 400, "stream_format",
       "invalid_value"},
      {"instructions", with("instructions", "Speak slowly.").dump(), 400, "instructions",
       "unsupported_value"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ApiError e = error_for(c.body);
    EXPECT_EQ(e.status, c.status);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, c.param);
    EXPECT_EQ(e.code, c.code);
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(SpeechRequest, SseRejectionSaysWhatToUse) {
  const ApiError e = error_for(with("stream_format", "sse"));
  EXPECT_NE(e.message.find("'audio'"), std::string::npos) << e.message;
}

TEST(SpeechRequest, LongUnknownFieldNamesAreCutInMessages) {
  const ApiError e = error_for(with(std::string(5000, 'x'), 1));
  EXPECT_EQ(e.code, "unknown_parameter");
  EXPECT_LT(e.message.size(), 200u);
}

TEST(SpeechRequest, DeeplyNestedJsonIsRefusedWithoutRecursion) {
  const std::string deep =
      "{\"model\": " + std::string(500000, '[') + std::string(500000, ']') + "}";
  EXPECT_EQ(error_for(deep).code, "invalid_json");
}

TEST(ApiError, BodyHasOpenAIsShape) {
  ApiError e = ApiError::invalid_request("bad speed", "speed", "invalid_value");
  EXPECT_EQ(e.body(), json::parse(R"({"error": {"message": "bad speed",
      "type": "invalid_request_error", "param": "speed", "code": "invalid_value"}})"));
  e.param.reset();
  e.code.reset();
  EXPECT_TRUE(e.body()["error"]["param"].is_null());
  EXPECT_TRUE(e.body()["error"]["code"].is_null());
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);             // stray continuation byte
  EXPECT_EQ(find_invalid_utf8("ab\xC0\xAF"), 2u);         // overlong '/'
  EXPECT_EQ(find_invalid_utf8("a\xE0\x80\xAF"), 1u);      // overlong, three bytes
  EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);      // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("a\xF4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("a\xE2\x82"), 1u);          // truncated
  EXPECT_EQ(find_invalid_utf8("a\xFF"), 1u);
}

}  // namespace
}  // namespace voxd::server
