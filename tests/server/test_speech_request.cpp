// parse_speech_request: defaults, every field's checks and the OpenAI-style error each gives.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "server/api_error.h"
#include "server/speech_request.h"

namespace voxd::server {
namespace {

using nlohmann::json;

SpeechPolicy policy() {
  SpeechPolicy p;
  p.models = {"tts-1", "voxd"};
  p.voices = {"en-demo", "alloy"};
  p.voice_aliases = {{"nova", "en-demo"}};
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

ApiError error_for(const char* body) {
  return error_for(std::string(body));
}

json with(const std::string& field, const json& value) {
  json body = valid();
  body[field] = value;
  return body;
}

json with(const std::string& field, const json& value, const std::string& other,
          const json& other_value) {
  json body = with(field, value);
  body[other] = other_value;
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
  EXPECT_EQ(r.stream_format, StreamFormat::kAudio);
  EXPECT_EQ(r.instructions, "");
  EXPECT_EQ(r.sample_rate, std::nullopt);  // mp3 at the voice's rate
  EXPECT_EQ(r.seed, std::nullopt);         // the sampling extensions: the voice's own
  EXPECT_EQ(r.temperature, std::nullopt);
  EXPECT_EQ(r.top_p, std::nullopt);
  EXPECT_EQ(r.top_k, std::nullopt);
  EXPECT_EQ(r.speaker, std::nullopt);
  EXPECT_EQ(r.refine_text, std::nullopt);
  EXPECT_EQ(r.emotion, std::nullopt);
  EXPECT_EQ(r.input_format, InputFormat::kText);
}

TEST(SpeechRequest, EveryFieldIsRead) {
  json body = valid();
  body["response_format"] = "flac";
  body["speed"] = 2.5;
  body["stream_format"] = "audio";
  body["instructions"] = "Speak slowly.";
  body["stream"] = false;
  const SpeechRequest r = parse_speech_request(body.dump(), policy());
  EXPECT_EQ(r.response_format, AudioFormat::kFlac);
  EXPECT_FLOAT_EQ(r.speed, 2.5f);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.instructions, "Speak slowly.");
  for (const char* name : {"mp3", "opus", "flac", "wav", "pcm"}) {
    EXPECT_EQ(
        format_name(
            parse_speech_request(with("response_format", name).dump(), policy()).response_format),
        name);
  }
}

// aac needs libavcodec: taken when this build has it, else refused (400, not a failure later).
TEST(SpeechRequest, AacIsTakenExactlyWhenTheBuildHasLibavcodec) {
#ifdef VOXD_HAVE_LIBAV
  EXPECT_EQ(parse_speech_request(with("response_format", "aac").dump(), policy()).response_format,
            AudioFormat::kAac);
  EXPECT_NE(
      error_for(with("response_format", "wma")).message.find("mp3, opus, aac, flac, wav or pcm"),
      std::string::npos);
#else
  const ApiError e = error_for(with("response_format", "aac"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format");
  EXPECT_EQ(e.code, "unsupported_format");
  EXPECT_NE(e.message.find("this server was built without libavcodec; aac is not available"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("use mp3, opus, flac, wav or pcm"), std::string::npos) << e.message;
  EXPECT_NE(error_for(with("response_format", "wma")).message.find("mp3, opus, flac, wav or pcm"),
            std::string::npos);
#endif
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

TEST(SpeechRequest, SamplingExtensionsAreRead) {
  json body = valid();
  body["seed"] = 42;
  body["temperature"] = 0.3;
  body["top_p"] = 0.7;
  body["top_k"] = 20;
  body["speaker"] = "random";
  body["refine_text"] = false;
  const SpeechRequest r = parse_speech_request(body.dump(), policy());
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.temperature, 0.3);
  EXPECT_EQ(r.top_p, 0.7);
  EXPECT_EQ(r.top_k, 20);
  EXPECT_EQ(r.speaker, "random");
  EXPECT_EQ(r.refine_text, false);
  EXPECT_EQ(parse_speech_request(with("refine_text", true).dump(), policy()).refine_text, true);
}

TEST(SpeechRequest, SambertExtensionsAreRead) {
  json body = valid();
  body["emotion"] = "emotion_happy";
  body["input_format"] = "kantts_symbols";
  const SpeechRequest r = parse_speech_request(body.dump(), policy());
  EXPECT_EQ(r.emotion, "emotion_happy");
  EXPECT_EQ(r.input_format, InputFormat::kKanTtsSymbols);
  EXPECT_EQ(parse_speech_request(with("input_format", "text").dump(), policy()).input_format,
            InputFormat::kText);
}

TEST(SpeechRequest, SamplingExtensionLimitsAreInclusive) {
  const auto parse = [](const std::string& field, const json& value) {
    return parse_speech_request(with(field, value).dump(), policy());
  };
  EXPECT_EQ(parse("seed", 0).seed, 0u);
  // 2^64-1 as the body spells it: beyond int64, within JSON's unsigned integers.
  EXPECT_EQ(
      parse_speech_request(
          R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "seed": 18446744073709551615})",
          policy())
          .seed,
      UINT64_MAX);
  EXPECT_EQ(parse("temperature", 10).temperature, 10.0);
  EXPECT_EQ(parse("temperature", 1e-6).temperature, 1e-6);
  EXPECT_EQ(parse("top_p", 1).top_p, 1.0);
  EXPECT_EQ(parse("top_k", 1).top_k, 1);
  EXPECT_EQ(parse("top_k", kMaxTopK).top_k, kMaxTopK);
  const std::string longest(kMaxSpeakerBytes, 'a');
  EXPECT_EQ(parse("speaker", longest).speaker, longest);
  // Null is no value, as for OpenAI's fields.
  EXPECT_EQ(parse("seed", nullptr).seed, std::nullopt);
  EXPECT_EQ(parse("speaker", nullptr).speaker, std::nullopt);
}

TEST(SpeechRequest, SamplingExtensionErrorsGiveTheRange) {
  EXPECT_EQ(error_for(with("seed", -1)).message,
            "'seed' must be an integer from 0 to 18446744073709551615, got -1");
  EXPECT_EQ(error_for(with("seed", 1.5)).message,
            "'seed' must be an integer from 0 to 18446744073709551615, got number");
  EXPECT_EQ(error_for(with("top_k", 0)).message,
            "'top_k' must be an integer from 1 to 100000, got 0");
  EXPECT_EQ(error_for(with("temperature", 0)).message,
            "'temperature' must be greater than 0 and at most 10.0, got 0");
  EXPECT_EQ(error_for(with("top_p", 1.5)).message,
            "'top_p' must be greater than 0 and at most 1.0, got 1.5");
  EXPECT_EQ(error_for(with("speaker", std::string(kMaxSpeakerBytes + 1, 'a'))).message,
            "'speaker' is 65537 bytes long; the limit is 65536");
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
      {"unknown field", with("volume", 0.5).dump(), 400, "volume", "unknown_parameter"},
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
      {"unknown voice", with("voice", "shimmer").dump(), 400, "voice", "invalid_value"},
      {"voice object without id", with("voice", json::object()).dump(), 400, "voice",
       "missing_required_parameter"},
      {"voice object with a number id", with("voice", {{"id", 7}}).dump(), 400, "voice",
       "invalid_type"},
      {"voice object with another key", with("voice", {{"id", "en-demo"}, {"name", "x"}}).dump(),
       400, "voice", "unknown_parameter"},
      {"voice a number", with("voice", 3).dump(), 400, "voice", "invalid_type"},
      {"unknown voice object", with("voice", {{"id", "shimmer"}}).dump(), 400, "voice",
       "invalid_value"},
      {"voice as a path", with("voice", "../voices/en-demo").dump(), 400, "voice", "invalid_value"},
      {"wma", with("response_format", "wma").dump(), 400, "response_format", "unsupported_format"},
      {"format in capitals", with("response_format", "MP3").dump(), 400, "response_format",
       "unsupported_format"},
      {"speed too low", with("speed", 0.2).dump(), 400, "speed", "invalid_value"},
      {"speed too high", with("speed", 4.01).dump(), 400, "speed", "invalid_value"},
      {"speed 1e400", R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "speed": 1e400})",
       400, "speed", "invalid_value"},
      {"bad stream_format", with("stream_format", "video").dump(), 400, "stream_format",
       "invalid_value"},
      {"stream_format a number", with("stream_format", 1).dump(), 400, "stream_format",
       "invalid_type"},
      {"sse with stream false", with("stream_format", "sse", "stream", false).dump(), 400,
       "stream_format", "unsupported_value"},
      {"instructions not a string", with("instructions", json::array()).dump(), 400, "instructions",
       "invalid_type"},
      {"instructions too long",
       with("instructions", std::string(kMaxInstructionsChars + 1, 'a')).dump(), 400,
       "instructions", "invalid_value"},
      {"sample_rate for mp3", with("sample_rate", 24000).dump(), 400, "sample_rate",
       "unsupported_value"},
      {"sample_rate not offered", with("sample_rate", 23000, "response_format", "pcm").dump(), 400,
       "sample_rate", "invalid_value"},
      {"sample_rate negative", with("sample_rate", -8000, "response_format", "wav").dump(), 400,
       "sample_rate", "invalid_value"},
      {"sample_rate a float", with("sample_rate", 24000.5, "response_format", "wav").dump(), 400,
       "sample_rate", "invalid_type"},
      {"sample_rate another word", with("sample_rate", "high", "response_format", "pcm").dump(),
       400, "sample_rate", "invalid_value"},
      {"seed negative", with("seed", -1).dump(), 400, "seed", "invalid_value"},
      {"seed a fraction", with("seed", 2.5).dump(), 400, "seed", "invalid_type"},
      {"seed written 3.0", with("seed", 3.0).dump(), 400, "seed", "invalid_type"},
      {"seed with an exponent",
       R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "seed": 1e3})", 400, "seed",
       "invalid_type"},
      {"seed a string", with("seed", "3").dump(), 400, "seed", "invalid_type"},
      {"seed a boolean", with("seed", true).dump(), 400, "seed", "invalid_type"},
      {"seed 2^64",
       R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "seed": 18446744073709551616})", 400,
       "seed", "invalid_type"},
      {"temperature a string", with("temperature", "hot").dump(), 400, "temperature",
       "invalid_type"},
      {"temperature 0", with("temperature", 0).dump(), 400, "temperature", "invalid_value"},
      {"temperature negative", with("temperature", -0.5).dump(), 400, "temperature",
       "invalid_value"},
      {"temperature too high", with("temperature", 10.01).dump(), 400, "temperature",
       "invalid_value"},
      {"temperature 1e400",
       R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "temperature": 1e400})", 400,
       "temperature", "invalid_value"},
      {"top_p a string", with("top_p", "0.5").dump(), 400, "top_p", "invalid_type"},
      {"top_p 0", with("top_p", 0).dump(), 400, "top_p", "invalid_value"},
      {"top_p above 1", with("top_p", 1.01).dump(), 400, "top_p", "invalid_value"},
      {"top_k 0", with("top_k", 0).dump(), 400, "top_k", "invalid_value"},
      {"top_k negative", with("top_k", -5).dump(), 400, "top_k", "invalid_value"},
      {"top_k too high", with("top_k", kMaxTopK + 1).dump(), 400, "top_k", "invalid_value"},
      {"top_k a fraction", with("top_k", 2.5).dump(), 400, "top_k", "invalid_type"},
      {"top_k a string", with("top_k", "20").dump(), 400, "top_k", "invalid_type"},
      {"speaker a number", with("speaker", 2).dump(), 400, "speaker", "invalid_type"},
      {"speaker empty", with("speaker", "").dump(), 400, "speaker", "invalid_value"},
      {"speaker too long", with("speaker", std::string(kMaxSpeakerBytes + 1, 'a')).dump(), 400,
       "speaker", "invalid_value"},
      {"refine_text a string", with("refine_text", "no").dump(), 400, "refine_text",
       "invalid_type"},
      {"refine_text a number", with("refine_text", 0).dump(), 400, "refine_text", "invalid_type"},
      {"emotion empty", with("emotion", "").dump(), 400, "emotion", "invalid_value"},
      {"emotion too long", with("emotion", std::string(kMaxEmotionBytes + 1, 'e')).dump(), 400,
       "emotion", "invalid_value"},
      {"emotion a number", with("emotion", 3).dump(), 400, "emotion", "invalid_type"},
      {"input_format unknown", with("input_format", "ssml").dump(), 400, "input_format",
       "invalid_value"},
      {"input_format a list", with("input_format", json::array()).dump(), 400, "input_format",
       "invalid_type"},
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

TEST(SpeechRequest, SseIsCarried) {
  EXPECT_EQ(parse_speech_request(with("stream_format", "sse").dump(), policy()).stream_format,
            StreamFormat::kSse);
  EXPECT_EQ(parse_speech_request(with("stream_format", "audio").dump(), policy()).stream_format,
            StreamFormat::kAudio);
}

TEST(SpeechRequest, VoiceMayBeAnObjectWithAnId) {
  EXPECT_EQ(parse_speech_request(with("voice", {{"id", "alloy"}}).dump(), policy()).voice, "alloy");
}

TEST(SpeechRequest, AnAliasGivesItsVoice) {
  EXPECT_EQ(parse_speech_request(with("voice", "nova").dump(), policy()).voice, "en-demo");
  EXPECT_EQ(parse_speech_request(with("voice", {{"id", "nova"}}).dump(), policy()).voice,
            "en-demo");
}

TEST(SpeechRequest, UnknownVoiceListsVoicesAndAliases) {
  const ApiError e = error_for(with("voice", "shimmer"));
  EXPECT_NE(e.message.find("en-demo, alloy, nova"), std::string::npos) << e.message;
}

TEST(SpeechRequest, AliasOfAVoiceNotServedIsRefused) {
  SpeechPolicy p = policy();
  p.voice_aliases["echo"] = "gone";
  try {
    parse_speech_request(with("voice", "echo").dump(), p);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "voice");
  }
}

TEST(SpeechRequest, InstructionsAtTheLimitAreKept) {
  const std::string longest(kMaxInstructionsChars, 'a');
  EXPECT_EQ(parse_speech_request(with("instructions", longest).dump(), policy()).instructions,
            longest);
}

TEST(SpeechRequest, PcmIsAt24kHzUnlessAskedOtherwise) {
  const json pcm = with("response_format", "pcm");
  EXPECT_EQ(parse_speech_request(pcm.dump(), policy()).sample_rate, kOpenAiPcmRate);
  json native = pcm;
  native["sample_rate"] = "native";
  EXPECT_EQ(parse_speech_request(native.dump(), policy()).sample_rate, std::nullopt);
  json rate = pcm;
  rate["sample_rate"] = 16000;
  EXPECT_EQ(parse_speech_request(rate.dump(), policy()).sample_rate, 16000);
  json wav = with("response_format", "wav");
  EXPECT_EQ(parse_speech_request(wav.dump(), policy()).sample_rate, std::nullopt);
  wav["sample_rate"] = 48000;
  EXPECT_EQ(parse_speech_request(wav.dump(), policy()).sample_rate, 48000);
  for (int64_t r : kSampleRates) {
    wav["sample_rate"] = r;
    EXPECT_EQ(parse_speech_request(wav.dump(), policy()).sample_rate, r);
  }
}

TEST(SpeechRequest, BadSampleRateListsTheRatesOffered) {
  const ApiError e = error_for(with("sample_rate", 23000, "response_format", "pcm"));
  EXPECT_NE(e.message.find("\"native\" or a rate in Hz: 8000, 11025, 12000, 16000, 22050, 24000, "
                           "32000, 44100 or 48000, got 23000"),
            std::string::npos)
      << e.message;
}

TEST(SpeechRequest, NumberOverflowNamesTheField) {
  const ApiError e =
      error_for(R"({"model": "tts-1", "input": "Hi.", "voice": "alloy", "speed": 1e400})");
  EXPECT_EQ(e.param, "speed");
  EXPECT_NE(e.message.find("'speed'"), std::string::npos) << e.message;
  // A number that overflows after the field's value has ended names no field.
  const ApiError at_top = error_for("1e400");
  EXPECT_EQ(at_top.param, std::nullopt);
  EXPECT_EQ(at_top.status, 400);
}

TEST(SpeechRequest, SyntaxErrorsNameTheFieldBeingRead) {
  const ApiError e = error_for(R"({"model": "tts-1", "speed": tru})");
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("(in 'speed')"), std::string::npos) << e.message;
  const ApiError between = error_for(R"({"model": "tts-1", "speed": 1.5 x})");
  EXPECT_EQ(between.code, "invalid_json");
  EXPECT_EQ(between.message.find("(in '"), std::string::npos) << between.message;
}

TEST(SpeechRequest, ErrorsQuoteOnlyTheStartOfABadToken) {
  const std::string huge(2 << 20, '7');
  // A number too large for a double, one in exponent form, a string with a raw line feed.
  for (const std::string& body :
       {R"({"model": "tts-1", "speed": 1)" + huge + "}", R"({"model": 7)" + huge + "e99999}",
        R"({"model": "tts-1", "input": ")" + huge + "\n\"}"}) {
    const ApiError e = error_for(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_LE(e.message.size(), 320u) << e.message.substr(0, 400);
    EXPECT_NE(e.message.find("777..."), std::string::npos) << e.message.substr(0, 400);
  }
}

TEST(VoiceAliases, ParsedFromAliasEqualsVoice) {
  const std::map<std::string, std::string> aliases =
      parse_voice_aliases({"alloy=en-demo", "echo=de-demo"}, {"en-demo", "de-demo"});
  EXPECT_EQ(aliases,
            (std::map<std::string, std::string>{{"alloy", "en-demo"}, {"echo", "de-demo"}}));
  EXPECT_TRUE(parse_voice_aliases({}, {"en-demo"}).empty());
}

TEST(VoiceAliases, BadEntriesAreInputErrorsNamingThem) {
  const std::vector<std::string> voices = {"en-demo"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"alloy"}, "'alloy' must be ALIAS=VOICE"},
      {{"=en-demo"}, "'=en-demo' must be ALIAS=VOICE"},
      {{"alloy="}, "'alloy=' must be ALIAS=VOICE"},
      {{"alloy=nova"}, "no voice 'nova' is served; served: en-demo"},
      {{"en-demo=en-demo"}, "'en-demo' is already a voice's name"},
      {{"alloy=en-demo", "alloy=en-demo"}, "the alias 'alloy' is given twice"},
  };
  for (const auto& [entries, expected] : cases) {
    SCOPED_TRACE(expected);
    try {
      parse_voice_aliases(entries, voices);
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
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
