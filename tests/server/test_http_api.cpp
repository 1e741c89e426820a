// HttpApi against a real server on 127.0.0.1 (a free port) with a fake SpeechService that
// speaks a sine wave: bad input, authentication, wrong paths and methods, limits, streamed and
// whole-file audio that decodes, a client leaving mid-stream, overload at the connection limit,
// CORS, the JSON endpoints, and 200 random malformed requests followed by valid ones. Waits for
// events have generous bounds and pass as soon as the event happens.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "audio_decode.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/audio_encoder.h"
#include "server/descriptor_table.h"
#include "server/http_api.h"

namespace voxd::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int64_t kRate = 22050;
constexpr int64_t kLongSeconds = 360;  // ~16 MB of 16-bit samples: more than loopback buffers
constexpr auto kEventTimeout = 60s;    // how long a test waits for something that should happen
constexpr const char* kKey = "sk-test-key";

float sine(int64_t i) {
  return 0.5f * static_cast<float>(std::sin(2 * M_PI * 440.0 * static_cast<double>(i) / kRate));
}

// What the fake's jobs have done, for the tests to wait on.
struct JobLog {
  std::mutex mutex;
  std::condition_variable changed;
  int alive = 0;
  int running = 0;
  int cancelled = 0;
  int admitting = 0;  // "slow admission" requests in admit()
  bool gate_open = false;

  template <typename Pred>
  bool wait_for(Pred pred) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, kEventTimeout, pred);
  }
  void update(const std::function<void()>& f) {
    {
      std::lock_guard lock(mutex);
      f();
    }
    changed.notify_all();
  }
};

// Opens the log's gate when it goes, however a test ends: declared after the futures of requests
// waiting at the gate, it lets them finish before they are waited for.
struct GateOpener {
  JobLog& log;
  ~GateOpener() {
    log.update([&] { log.gate_open = true; });
  }
};

// Speaks a 440 Hz sine on a thread of its own, as the engine does. The input chooses how:
// "endless" produces until dropped (for at most ten minutes), "gate" waits for JobLog::gate_open
// first (or for the job to be dropped), "fail" fails after some audio, "long" gives kLongSeconds;
// anything else gives one second. A job dropped before its end counts as cancelled.
class FakeJob final : public SpeechJob {
 public:
  FakeJob(std::string input, JobLog& log) : input_(std::move(input)), log_(log) {
    log_.update([&] { ++log_.alive; });
  }
  ~FakeJob() override {
    bool finished = false;
    {
      std::lock_guard lock(mutex_);
      dropped_ = true;
      finished = finished_ || failed_;
    }
    room_.notify_all();
    log_.update([&] {
      if (!finished) ++log_.cancelled;
    });  // and a gate wait ends
    if (producer_.joinable()) producer_.join();
    log_.update([&] { --log_.alive; });
  }

  int64_t sample_rate() const override { return kRate; }

  void start(std::function<void()> wake) override {
    wake_ = std::move(wake);
    producer_ = std::thread([this] { produce(); });
  }

  bool take(std::vector<float>& samples) override {
    std::lock_guard lock(mutex_);
    // Not UTF-8 at its end, as a library's message may not be.
    if (failed_ && pieces_.empty()) throw std::runtime_error("the fake vocoder broke \xff");
    if (!pieces_.empty()) {
      samples.insert(samples.end(), pieces_.front().begin(), pieces_.front().end());
      pieces_.pop_front();
      room_.notify_all();
    }
    return finished_ && pieces_.empty();
  }

 private:
  bool dropped() {
    std::lock_guard lock(mutex_);
    return dropped_;
  }

  void produce() {
    log_.update([&] { ++log_.running; });
    if (input_ == "gate") {
      std::unique_lock lock(log_.mutex);
      log_.changed.wait(lock, [&] { return log_.gate_open || dropped(); });
    }
    // Endless: as much as the client takes, for ten minutes (a fixed length of audio goes
    // through loopback in well under a second).
    const bool endless = input_ == "endless";
    const auto until = std::chrono::steady_clock::now() + 10min;
    const int64_t total = endless            ? INT64_MAX - 2205
                          : input_ == "long" ? kLongSeconds * kRate
                                             : kRate;
    for (int64_t start = 0;
         start < total && !dropped() && (!endless || std::chrono::steady_clock::now() < until);
         start += 2205) {
      std::vector<float> piece;
      for (int64_t i = start; i < std::min(total, start + 2205); ++i) piece.push_back(sine(i));
      {
        std::unique_lock lock(mutex_);
        if (input_ == "fail" && start > kRate / 2) {
          failed_ = true;
          break;
        }
        // Back-pressure: at most eight pieces wait for the client.
        room_.wait(lock, [&] { return pieces_.size() < 8 || dropped_; });
        pieces_.push_back(std::move(piece));
      }
      wake_();
    }
    {
      std::lock_guard lock(mutex_);
      finished_ = !dropped_ && !failed_;
    }
    wake_();
    log_.update([&] { --log_.running; });
  }

  std::string input_;
  JobLog& log_;
  std::function<void()> wake_;
  std::mutex mutex_;
  std::condition_variable room_;
  std::deque<std::vector<float>> pieces_;
  bool failed_ = false;
  bool finished_ = false;
  bool dropped_ = false;
  std::thread producer_;
};

class FakeService final : public SpeechService {
 public:
  std::vector<std::string> models() const override { return {"tts-1", "voxd"}; }
  std::vector<VoiceInfo> voices() const override {
    return {{"en-demo", kRate, "en", "fastspeech2-hifigan", {}, {}, false},
            {"alloy", kRate, "zh", "chattts", {"seed_1528"}, {"calm"}, true}};
  }
  Readiness readiness() const override {
    std::lock_guard lock(mutex_);
    return readiness_;
  }
  std::string memory_summary_text() const override { return "fake memory summary\n"; }
  json memory_summary_json() const override { return {{"device", "cpu"}}; }
  void bind_metrics(MetricsRegistry& registry) override {
    registry.counter("voxd_fake_steps_total", "A counter the service keeps.").inc(0);
  }
  void collect_metrics(MetricsRegistry& registry) override {
    registry.gauge("voxd_fake_queue_depth", "A gauge the service sets.").set(3);
  }
  std::unique_ptr<SpeechJob> admit(const SpeechRequest& request) override {
    if (request.input == "busy") {
      ApiError e;
      e.status = 503;
      e.message = "the queue is full";
      e.type = "server_error";
      e.code = "queue_full";
      e.retry_after_s = 2;
      throw e;
    }
    if (request.input == "...") {
      throw ApiError::invalid_request("nothing to pronounce in 'input'", "input", "empty_input");
    }
    if (request.input == "slow admission") {
      log.update([&] { ++log.admitting; });
      std::unique_lock lock(log.mutex);
      log.changed.wait(lock, [&] { return log.gate_open; });
    }
    return std::make_unique<FakeJob>(request.input, log);
  }

  void set_readiness(Readiness r) {
    std::lock_guard lock(mutex_);
    readiness_ = std::move(r);
  }

  JobLog log;

 private:
  mutable std::mutex mutex_;
  Readiness readiness_{true, ""};
};

HttpConfig test_config() {
  HttpConfig c;
  c.port = 0;
  c.api_keys = {"another-key", kKey};
  c.max_body_bytes = 64 << 10;
  c.max_input_chars = 1000;
  c.max_header_bytes = 4096;
  c.keep_alive_timeout_s = 1;
  c.read_timeout_s = 30;
  c.write_timeout_s = 30;
  return c;
}

class HttpApiTest : public ::testing::Test {
 protected:
  void start(HttpConfig config = test_config()) {
    api_ = std::make_unique<HttpApi>(std::move(config), service_, metrics_);
    api_->start();
  }
  void TearDown() override {
    if (api_) api_->stop();
    // Every job was released.
    EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.alive == 0; }));
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", api_->port());
    c.set_read_timeout(60);
    c.set_write_timeout(60);
    c.set_connection_timeout(60);
    return c;
  }
  static httplib::Headers auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

  httplib::Result post(const std::string& body, const std::string& path = "/v1/audio/speech",
                       httplib::Headers headers = auth()) const {
    return client().Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result get(const std::string& path, httplib::Headers headers = auth()) const {
    return client().Get(path.c_str(), headers);
  }

  // A request; pcm at the voice's own rate (the tests compare samples), not OpenAI's 24 kHz.
  static json speech(const std::string& format = "wav", bool stream = true,
                     const std::string& input = "Hello.") {
    json body = {{"model", "tts-1"},
                 {"input", input},
                 {"voice", "en-demo"},
                 {"response_format", format},
                 {"stream", stream}};
    if (format == "pcm") body["sample_rate"] = "native";
    return body;
  }

  // Checks `res` is an error with OpenAI's body and `status`; returns the error object.
  static json expect_error(const httplib::Result& res, int status) {
    EXPECT_TRUE(res) << "no response: " << httplib::to_string(res.error());
    if (!res) return {};
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    const json body = json::parse(res->body, nullptr, false);
    EXPECT_TRUE(body.is_object() && body.contains("error")) << res->body;
    if (!body.is_object() || !body.contains("error")) return {};
    const json& e = body["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_TRUE(e.contains("param") && e.contains("code"));
    return e;
  }

  // A valid request succeeds with one second of audio.
  void expect_server_healthy() const {
    const auto res = post(speech("pcm").dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body.size(), 2u * kRate);
  }

  // Waits until the registry shows `line`: the HTTP layer counts a request once its response has
  // been sent, so a client can see the response a moment before the count.
  bool metrics_show(const std::string& line) const {
    const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
    while (metrics_.render().find(line) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the metrics never showed " << line << "\n" << metrics_.render();
        return false;
      }
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  FakeService service_;
  MetricsRegistry metrics_;
  std::unique_ptr<HttpApi> api_;
};

// A TCP connection to 127.0.0.1:port, or -1.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::vector<short> expected_sine(int64_t n) {
  std::vector<short> q;
  for (int64_t i = 0; i < n; ++i) q.push_back(quantize_pcm16(sine(i)));
  return q;
}

TEST_F(HttpApiTest, StreamedWavIsChunkedAndDecodes) {
  start();
  const auto res = post(speech("wav", true).dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
  EXPECT_FALSE(res->has_header("Content-Length"));
  EXPECT_EQ(res->get_header_value("Content-Type"), "audio/wav");
  EXPECT_EQ(res->get_header_value("X-Sample-Rate"), "22050");
  const test::Decoded d = test::decode(res->body, true);
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.rate, kRate);
  EXPECT_EQ(d.shorts, expected_sine(kRate));
}

TEST_F(HttpApiTest, WholeFilesHaveContentLengthAndDecode) {
  start();
  const std::vector<std::pair<std::string, std::string>> formats = {{"wav", "audio/wav"},
                                                                    {"flac", "audio/flac"},
                                                                    {"pcm", "audio/pcm"},
                                                                    {"mp3", "audio/mpeg"},
                                                                    {"opus", "audio/ogg"}};
  for (const auto& [format, type] : formats) {
    SCOPED_TRACE(format);
    const auto res = post(speech(format, false).dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), type);
    EXPECT_EQ(res->get_header_value("Content-Length"), std::to_string(res->body.size()));
    EXPECT_FALSE(res->has_header("Transfer-Encoding"));
    const test::Decoded d =
        test::decode(res->body, format != "mp3" && format != "opus", format == "pcm" ? kRate : 0);
    ASSERT_TRUE(d.ok) << d.error;
    if (format == "mp3" || format == "opus") {
      EXPECT_NEAR(static_cast<double>(d.floats.size()) / d.rate, 1.0, 0.15);
    } else {
      EXPECT_EQ(d.shorts, expected_sine(kRate));
    }
  }
}

TEST_F(HttpApiTest, EveryStreamedFormatDecodes) {
  start();
  for (const char* format : {"mp3", "opus", "flac", "pcm"}) {
    SCOPED_TRACE(format);
    const auto res = post(speech(format, true).dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Transfer-Encoding"), "chunked");
    const bool exact = std::string(format) == "flac" || std::string(format) == "pcm";
    const test::Decoded d =
        test::decode(res->body, exact, std::string(format) == "pcm" ? kRate : 0);
    ASSERT_TRUE(d.ok) << d.error;
    if (exact) {
      EXPECT_EQ(d.shorts, expected_sine(kRate));
    } else {
      EXPECT_NEAR(static_cast<double>(d.floats.size()) / d.rate, 1.0, 0.15);
    }
  }
}

TEST_F(HttpApiTest, DefaultFormatIsMp3) {
  start();
  json body = speech();
  body.erase("response_format");
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "audio/mpeg");
}

TEST_F(HttpApiTest, BadInputGetsOpenAIErrorsAndTheServerKeepsServing) {
  start();
  struct Case {
    const char* name;
    std::string body;
    int status;
    const char* code;
  };
  json unknown = speech();
  unknown["volume"] = 1;
  json wrong_type = speech();
  wrong_type["speed"] = "fast";
  json missing = speech();
  missing.erase("input");
  const std::vector<Case> cases = {
      {"malformed JSON", "{\"model\": \"tts-1\",", 400, "invalid_json"},
      {"not JSON", "model=tts-1&input=hi", 400, "invalid_json"},
      {"wrong type", wrong_type.dump(), 400, "invalid_type"},
      {"unknown field", unknown.dump(), 400, "unknown_parameter"},
      {"missing input", missing.dump(), 400, "missing_required_parameter"},
      {"empty input", speech("wav", true, "").dump(), 400, "empty_input"},
      {"blank input", speech("wav", true, " \n\t ").dump(), 400, "empty_input"},
      {"input too long", speech("wav", true, std::string(1001, 'a')).dump(), 413, "input_too_long"},
      {"invalid UTF-8", "{\"model\": \"tts-1\", \"input\": \"\xFF\xFE\", \"voice\": \"en-demo\"}",
       400, "invalid_utf8"},
      {"unknown voice", json{{"model", "tts-1"}, {"input", "hi"}, {"voice", "nova"}}.dump(), 400,
       "invalid_value"},
      {"unknown model", json{{"model", "tts-9"}, {"input", "hi"}, {"voice", "alloy"}}.dump(), 404,
       "model_not_found"},
      {"bad format", speech("wma").dump(), 400, "unsupported_format"},
      {"speed too high",
       json{{"model", "tts-1"}, {"input", "hi"}, {"voice", "alloy"}, {"speed", 5}}.dump(), 400,
       "invalid_value"},
      {"speed too low",
       json{{"model", "tts-1"}, {"input", "hi"}, {"voice", "alloy"}, {"speed", 0.1}}.dump(), 400,
       "invalid_value"},
      {"nothing to pronounce (from the service)", speech("wav", true, "...").dump(), 400,
       "empty_input"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const json e = expect_error(post(c.body), c.status);
    EXPECT_EQ(e.value("code", json()), c.code);
    expect_server_healthy();
  }
  EXPECT_EQ(service_.log.alive, 0);
}

TEST_F(HttpApiTest, BodyOverTheLimitIs413) {
  start();
  const json e = expect_error(post(std::string(100 << 10, ' ')), 413);
  EXPECT_EQ(e["code"], "request_too_large");
  expect_server_healthy();
}

TEST_F(HttpApiTest, HeadersOverTheLimitAre431) {
  start();
  httplib::Headers headers = auth();
  headers.emplace("X-Padding", std::string(5000, 'p'));
  expect_error(post(speech().dump(), "/v1/audio/speech", headers), 431);
  expect_server_healthy();
}

TEST_F(HttpApiTest, WrongPathIs404AndWrongMethodIs405) {
  start();
  const json e = expect_error(post(speech().dump(), "/v1/audio/speak"), 404);
  EXPECT_NE(e["message"].get<std::string>().find("/v1/audio/speak"), std::string::npos);
  expect_error(get("/nothing/here"), 404);

  const auto res = get("/v1/audio/speech");
  expect_error(res, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "POST");
  expect_error(client().Delete("/healthz"), 405);
  expect_error(client().Put("/v1/models", auth(), "{}", "application/json"), 405);
  expect_error(client().Options("/v1/audio/speech"), 405);  // CORS is off
  expect_server_healthy();
}

TEST_F(HttpApiTest, ApiKeyIsRequiredExceptForHealthz) {
  start();
  EXPECT_EQ(expect_error(post(speech().dump(), "/v1/audio/speech", {}), 401)["code"],
            "missing_api_key");
  const auto wrong = post(speech().dump(), "/v1/audio/speech", {{"Authorization", "Bearer sk-no"}});
  EXPECT_EQ(expect_error(wrong, 401)["code"], "invalid_api_key");
  EXPECT_EQ(wrong->get_header_value("WWW-Authenticate"), "Bearer");
  expect_error(post(speech().dump(), "/v1/audio/speech", {{"Authorization", kKey}}), 401);
  expect_error(post(speech().dump(), "/v1/audio/speech", {{"Authorization", "Bearer "}}), 401);
  expect_error(post(speech().dump(), "/v1/audio/speech",
                    {{"Authorization", std::string("Bearer ") + kKey + "x"}}),
               401);
  // The page asks its user for the key; the API calls it makes need one.
  const auto page = get("/", {});
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  for (const char* path :
       {"/v1/models", "/v1/voices", "/readyz", "/metrics", "/debug/memory", "/debug/live"}) {
    SCOPED_TRACE(path);
    expect_error(get(path, {}), 401);
    const auto ok = get(path);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
  }
  const auto health = get("/healthz", {});
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // The second configured key works too.
  const auto other =
      post(speech("pcm").dump(), "/v1/audio/speech", {{"Authorization", "Bearer another-key"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(service_.log.alive, 0);
}

TEST_F(HttpApiTest, APortInUseIsAnError) {
  start();
  EXPECT_GT(api_->port(), 0);
  HttpConfig config = test_config();
  config.port = api_->port();
  HttpApi second(config, service_, metrics_);
  EXPECT_THROW(second.start(), Error);
  expect_server_healthy();
}

TEST_F(HttpApiTest, StopRightAfterStartReturns) {
  for (int i = 0; i < 20; ++i) {
    HttpApi api(test_config(), service_, metrics_);
    api.start();
    api.stop();
    api.stop();
  }
  start();
  expect_server_healthy();
}

TEST_F(HttpApiTest, NoKeysMeansNoAuthentication) {
  HttpConfig config = test_config();
  config.api_keys.clear();
  start(config);
  const auto res = post(speech("pcm").dump(), "/v1/audio/speech", {});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST_F(HttpApiTest, ClientLeavingMidStreamCancelsTheJob) {
  start();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/audio/speech";
  req.headers = auth();
  req.headers.emplace("Content-Type", "application/json");
  req.body = speech("pcm", true, "endless").dump();
  size_t received = 0;
  req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
    received += n;
    return received < 100000;  // about two seconds of audio, then hang up
  };
  const auto res = client().send(req);
  EXPECT_EQ(res.error(), httplib::Error::Canceled);
  EXPECT_GE(received, 100000u);
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.cancelled == 1; }));
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.alive == 0; }));
  expect_server_healthy();
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"cancelled\"} 1\n"));
}

TEST_F(HttpApiTest, ClientLeavingWhileQueuedCancelsTheJob) {
  start();
  const std::string body = speech("pcm", true, "gate").dump();
  const std::string request =
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kKey) +
      "\r\nContent-Type: application/json\r\n" + "Content-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  const int fd = connect_to(api_->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
  close(fd);
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.cancelled == 1; }));
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.alive == 0; }));
  expect_server_healthy();
}

TEST_F(HttpApiTest, AdmissionErrorsKeepTheirStatusAndRetryAfter) {
  start();
  const auto res = post(speech("wav", true, "busy").dump());
  EXPECT_EQ(expect_error(res, 503)["code"], "queue_full");
  EXPECT_EQ(res->get_header_value("Retry-After"), "2");
  expect_server_healthy();
}

TEST_F(HttpApiTest, SynthesisFailureIs500ForAFileAndCutsAStreamOff) {
  start();
  expect_error(post(speech("wav", false, "fail").dump()), 500);
  const auto streamed = post(speech("wav", true, "fail").dump());
  // The stream ends without its last chunk, which the client reports as an error.
  EXPECT_FALSE(streamed);
  expect_server_healthy();
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"failed\"} 2\n"));
}

TEST_F(HttpApiTest, ConnectionsOverTheLimitGet503) {
  HttpConfig config = test_config();
  config.max_connections = 1;
  start(config);
  // The only worker is busy with a job waiting at the gate.
  auto first =
      std::async(std::launch::async, [&] { return post(speech("pcm", true, "gate").dump()); });
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));

  const auto rejected = get("/healthz");
  EXPECT_EQ(expect_error(rejected, 503)["code"], "overloaded");
  EXPECT_EQ(rejected->get_header_value("Retry-After"), "1");

  service_.log.update([&] { service_.log.gate_open = true; });
  const auto res = first.get();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body.size(), 2u * kRate);
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.running == 0; }));
  // The first client's connection may still be held open (keep-alive) for a moment; once it is
  // closed the worker is free again.
  for (int attempt = 0;; ++attempt) {
    const auto again = get("/healthz");
    ASSERT_TRUE(again);
    if (again->status == 200) break;
    ASSERT_EQ(again->status, 503);
    ASSERT_LT(attempt, 600) << "the worker never became free";
    std::this_thread::sleep_for(100ms);
  }
}

TEST_F(HttpApiTest, StopCancelsRunningStreams) {
  start();
  auto streaming =
      std::async(std::launch::async, [&] { return post(speech("pcm", true, "endless").dump()); });
  // Once its first audio is taken, its head is on its way: a stop can only cut it off.
  ASSERT_TRUE(metrics_show("voxd_speech_time_to_first_audio_seconds_count 1\n"));
  api_->stop();
  EXPECT_EQ(service_.log.cancelled, 1);
  EXPECT_FALSE(streaming.get());  // cut off
}

TEST_F(HttpApiTest, ShutdownLetsSpeechInProgressFinishWithinTheGrace) {
  start();
  auto streaming =
      std::async(std::launch::async, [&] { return post(speech("pcm", true, "gate").dump()); });
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
  EXPECT_EQ(api_->speech_in_progress(), 1u);
  auto cancelled = std::async(std::launch::async, [&] { return api_->shutdown(kEventTimeout); });
  // No new connections once the listening socket is closed.
  for (int attempt = 0;; ++attempt) {
    const int fd = connect_to(api_->port());
    if (fd < 0) break;
    close(fd);
    ASSERT_LT(attempt, 6000) << "the server kept accepting connections";
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(cancelled.wait_for(0s), std::future_status::timeout);  // still waiting for the stream
  service_.log.update([&] { service_.log.gate_open = true; });
  const auto res = streaming.get();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body.size(), 2u * kRate);
  EXPECT_EQ(cancelled.get(), 0u);
  EXPECT_EQ(service_.log.cancelled, 0);
  EXPECT_EQ(api_->speech_in_progress(), 0u);
}

TEST_F(HttpApiTest, ShutdownCancelsWhatOutlivesTheGrace) {
  start();
  auto streaming =
      std::async(std::launch::async, [&] { return post(speech("pcm", true, "endless").dump()); });
  ASSERT_TRUE(metrics_show("voxd_speech_time_to_first_audio_seconds_count 1\n"));
  EXPECT_EQ(api_->shutdown(50ms), 1u);
  EXPECT_EQ(service_.log.cancelled, 1);
  EXPECT_FALSE(streaming.get());        // cut off
  EXPECT_EQ(api_->shutdown(50ms), 0u);  // a second call does nothing
}

TEST_F(HttpApiTest, WhileDrainingOpenConnectionsServeNoNewRequest) {
  start();
  const int fd = connect_to(api_->port());
  ASSERT_GE(fd, 0);
  // Sends a request on the kept-alive connection; returns the answer, empty when it was closed.
  const auto request = [&](const std::string& path) {
    const std::string text = "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                             std::string(kKey) + "\r\n\r\n";
    std::string answer;
    if (send(fd, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
      return answer;
    }
    char buffer[4096];
    while (answer.find('}') == std::string::npos) {
      const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      answer.append(buffer, static_cast<size_t>(n));
    }
    return answer;
  };
  EXPECT_TRUE(request("/v1/models").starts_with("HTTP/1.1 200"));
  api_->stop_accepting();
  // cpp-httplib closes idle connections once the listener is closed; a request that gets in
  // before that is refused.
  const std::string answer = request("/v1/models");
  if (!answer.empty()) {
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 503")) << answer;
    EXPECT_NE(answer.find("shutting_down"), std::string::npos) << answer;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  }
  close(fd);
  api_->stop();
}

// A speech request counts once in speech_in_progress() from its headers to its reply's end: its
// reply takes the count over from its arrival in one step (it counted twice for a moment, which
// a sampler reading the count all the while sees).
TEST_F(HttpApiTest, ASpeechRequestCountsOnceFromItsHeadersToItsEnd) {
  start();
  std::atomic<bool> done{false};
  std::atomic<size_t> most{0};
  std::thread sampler([&] {
    while (!done.load()) most.store(std::max(most.load(), api_->speech_in_progress()));
  });
  for (int i = 0; i < 20; ++i) {
    const auto res = post(speech("pcm", false).dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    // The reply ends once its connection lets it go, after the client has the body: the next
    // request goes once this one no longer counts.
    for (int wait = 0; wait < 500 && api_->speech_in_progress() != 0; ++wait) {
      std::this_thread::sleep_for(1ms);
    }
  }
  done.store(true);
  sampler.join();
  EXPECT_EQ(most.load(), 1u);
  EXPECT_EQ(api_->speech_in_progress(), 0u);
}

// The grace waits for speech still being admitted when the server stops accepting (a burst
// queued for the front end), and that speech is answered.
TEST_F(HttpApiTest, TheGraceWaitsForSpeechStillBeingAdmitted) {
  start();
  auto queued = std::async(std::launch::async,
                           [&] { return post(speech("pcm", true, "slow admission").dump()); });
  const GateOpener gate_opener{service_.log};  // declared after the future: opens first
  for (int i = 0; i < 500 && api_->speech_in_progress() == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(api_->speech_in_progress(), 1u);
  api_->stop_accepting();
  EXPECT_FALSE(api_->wait_for_speech(200ms));
  service_.log.update([&] { service_.log.gate_open = true; });
  EXPECT_TRUE(api_->wait_for_speech(30s));
  const auto res = queued.get();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body.size(), 2u * kRate);
}

// A speech request whose headers came before the drain and whose body is still being uploaded
// counts as speech in progress, is waited for by the grace, and is answered.
TEST_F(HttpApiTest, TheGraceWaitsForASpeechBodyStillArriving) {
  start();
  const std::string body = speech("pcm", false).dump();
  const std::string head =
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kKey) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n";
  const int fd = connect_to(api_->port());
  ASSERT_GE(fd, 0);
  const auto send_all = [fd](const std::string& bytes) {
    return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  };
  ASSERT_TRUE(send_all(head + body.substr(0, body.size() / 2)));
  for (int i = 0; i < 500 && api_->speech_in_progress() == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(api_->speech_in_progress(), 1u);
  api_->stop_accepting();
  EXPECT_FALSE(api_->wait_for_speech(200ms));
  ASSERT_TRUE(send_all(body.substr(body.size() / 2)));
  EXPECT_TRUE(api_->wait_for_speech(30s));
  std::string answer;
  char buffer[65536];
  for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  ASSERT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer.substr(0, 300);
  const size_t body_start = answer.find("\r\n\r\n");
  ASSERT_NE(body_start, std::string::npos);
  EXPECT_EQ(answer.size() - body_start - 4, 2u * kRate);
  EXPECT_EQ(api_->speech_in_progress(), 0u);
  api_->stop();
}

// Speech waiting for an admission thread is bounded: one more is answered 503 queue_full at
// once, and those waiting are served.
TEST_F(HttpApiTest, SpeechAwaitingAdmissionIsBounded) {
  HttpConfig config = test_config();
  config.admission_threads = 1;
  config.max_awaiting_admission = 1;
  start(config);
  auto admitting = std::async(std::launch::async,
                              [&] { return post(speech("pcm", true, "slow admission").dump()); });
  const GateOpener gate_opener{service_.log};
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.admitting == 1; }));
  auto awaiting = std::async(std::launch::async, [&] { return post(speech("pcm").dump()); });
  // Read and posted to the admission thread, not merely arriving: only then is the limit met.
  const auto awaiting_shown = [&] {
    const auto scrape = get("/metrics");
    return scrape &&
           scrape->body.find("voxd_speech_requests_awaiting_admission 1\n") != std::string::npos;
  };
  for (int i = 0; i < 1000 && !awaiting_shown(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(awaiting_shown());
  const auto refused = post(speech("pcm").dump());
  EXPECT_EQ(expect_error(refused, 503)["code"], "queue_full");
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  service_.log.update([&] { service_.log.gate_open = true; });
  for (auto* answer : {&admitting, &awaiting}) {
    const auto res = answer->get();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"rejected\"} 1\n"));
}

TEST_F(HttpApiTest, RequestIdsAreEchoedOrMade) {
  start();
  const auto given = get("/v1/models", {{"Authorization", std::string("Bearer ") + kKey},
                                        {"X-Request-Id", "client-id-42"}});
  ASSERT_TRUE(given);
  EXPECT_EQ(given->get_header_value("X-Request-Id"), "client-id-42");
  const auto first = get("/v1/models");
  const auto second = get("/v1/models");
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(first->get_header_value("X-Request-Id").empty());
  EXPECT_NE(first->get_header_value("X-Request-Id"), second->get_header_value("X-Request-Id"));
}

TEST_F(HttpApiTest, JsonEndpoints) {
  start();
  auto res = get("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body), json::parse(R"({"object": "list", "data": [
      {"id": "tts-1", "object": "model", "created": 0, "owned_by": "voxd"},
      {"id": "voxd", "object": "model", "created": 0, "owned_by": "voxd"}]})"));
  res = get("/v1/voices");
  ASSERT_TRUE(res);
  const json voices = json::parse(res->body);
  ASSERT_EQ(voices["data"].size(), 2u);
  EXPECT_EQ(voices["data"][0],
            json::parse(R"({"id": "en-demo", "object": "voice", "sample_rate": 22050,
                            "language": "en", "family": "fastspeech2-hifigan", "speakers": [],
                            "emotions": [], "sampling": false})"));
  EXPECT_EQ(voices["data"][1],
            json::parse(R"({"id": "alloy", "object": "voice", "sample_rate": 22050,
                            "language": "zh", "family": "chattts", "speakers": ["seed_1528"],
                            "emotions": ["calm"], "sampling": true})"));

  res = get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  service_.set_readiness({false, "voices still loading"});
  res = get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(json::parse(res->body)["reason"], "voices still loading");

  res = get("/debug/memory");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "fake memory summary\n");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  res = get("/debug/memory?format=json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["device"], "cpu");

  // What a live page polls: the memory summary and every metric, as JSON, counters moving.
  const auto requests_done = [&] {
    const auto live = get("/debug/live");
    EXPECT_TRUE(live && live->status == 200);
    if (!live) return -1.0;
    EXPECT_EQ(live->get_header_value("Content-Type"), "application/json");
    const json body = json::parse(live->body);
    EXPECT_GT(body["time"].get<double>(), 1.7e9);
    EXPECT_EQ(body["memory"]["device"], "cpu");
    EXPECT_EQ(body["metrics"]["voxd_http_connections"]["type"], "gauge");
    double done = 0;
    for (const json& series : body["metrics"]["voxd_http_requests_total"]["series"]) {
      done += series["value"].get<double>();
    }
    return done;
  };
  const double before = requests_done();
  EXPECT_GT(before, 0.0);
  // A request is counted once its response is sent, which may be after the client has it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double after = requests_done();
  while (after <= before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = requests_done();
  }
  EXPECT_GT(after, before);

  res = get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["status"], "ok");
}

TEST_F(HttpApiTest, MetricsIncludeRequestsAndServiceGauges) {
  start();
  expect_server_healthy();
  expect_error(get("/nope"), 404);
  const std::vector<std::string> lines = {
      "voxd_http_requests_total{route=\"/v1/audio/speech\",code=\"200\"} 1\n",
      "voxd_http_requests_total{route=\"other\",code=\"404\"} 1\n",
      "voxd_http_request_duration_seconds_count{route=\"other\"} 1\n",
      "voxd_speech_requests_total{outcome=\"ok\"} 1\n",
      "voxd_speech_time_to_first_audio_seconds_count 1\n"};
  for (const std::string& line : lines) ASSERT_TRUE(metrics_show(line));
  const auto res = get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res->body;
  for (const std::string& line : lines) EXPECT_NE(text.find(line), std::string::npos) << line;
  EXPECT_NE(text.find("voxd_fake_queue_depth 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE voxd_http_connections gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("voxd_http_connections_rejected_total 0\n"), std::string::npos) << text;
  EXPECT_NEAR(metrics_.counter("voxd_speech_audio_seconds_total", "").value(), 1.0, 1e-9);
}

TEST_F(HttpApiTest, CorsOnlyForConfiguredOrigins) {
  HttpConfig config = test_config();
  config.cors_origins = {"https://app.example"};
  start(config);
  httplib::Headers headers = auth();
  headers.emplace("Origin", "https://app.example");
  auto res = get("/v1/models", headers);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(res->get_header_value("Vary"), "Origin");

  headers = auth();
  headers.emplace("Origin", "https://evil.example");
  res = get("/v1/models", headers);
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));

  res = client().Options("/v1/audio/speech", {{"Origin", "https://app.example"},
                                              {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 204);
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Methods"), "OPTIONS, POST");
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  // Authorization named (a wildcard does not cover it), and any header an SDK adds.
  EXPECT_EQ(res->get_header_value("Access-Control-Allow-Headers"), "Authorization, *");
  expect_error(client().Options("/v1/audio/speech", {{"Origin", "https://evil.example"}}), 403);
  // The answer to another origin differs only by the origin: a cache must know it varies.
  headers = auth();
  headers.emplace("Origin", "https://evil.example");
  res = get("/v1/models", headers);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Vary"), "Origin");
}

TEST_F(HttpApiTest, NoCorsHeadersByDefault) {
  start();
  httplib::Headers headers = auth();
  headers.emplace("Origin", "https://app.example");
  const auto res = get("/v1/models", headers);
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
}

// Sends raw bytes on a fresh connection, says it has sent all, and returns what comes back
// until the server closes the connection.
std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_to(port);
  std::string reply;
  if (fd >= 0) {
    send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    char buffer[4096];
    for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;)
      reply.append(buffer, static_cast<size_t>(n));
    close(fd);
  }
  return reply;
}

// GET / is the web page, whole and from the binary: nothing it loads comes from elsewhere.
TEST_F(HttpApiTest, TheRootIsTheWebPageWithEverythingInIt) {
  start();
  const auto page = get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'self'"),
            std::string::npos);
  EXPECT_TRUE(page->body.starts_with("<!doctype html>"));
  EXPECT_NE(page->body.find("/v1/audio/speech"), std::string::npos);
  EXPECT_NE(page->body.find("/debug/live"), std::string::npos);
  EXPECT_EQ(page->body.find("http://"), std::string::npos);
  EXPECT_EQ(page->body.find("https://"), std::string::npos);
  EXPECT_EQ(page->body.find("src=\"//"), std::string::npos);
  const auto deleted = client().Delete("/", auth());
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 405);
}

TEST_F(HttpApiTest, RandomMalformedRequestsThenValidOnes) {
  start();
  std::mt19937 rng(12345);
  const std::string valid = speech("pcm").dump();
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const std::vector<json> odd_values = {
      nullptr,   true, 0, -1, 1e300, "", json::array(), json::object(), std::string(3000, 'x'),
      "\xC3\xA9"};
  for (int i = 0; i < 200; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const size_t kind = pick(6);
    if (kind == 0) {  // bytes of the body flipped, inserted, removed or cut off
      std::string body = valid;
      for (size_t k = 0, edits = 1 + pick(4); k < edits; ++k) {
        const size_t at = pick(body.size());
        switch (pick(4)) {
          case 0:
            body[at] = static_cast<char>(pick(256));
            break;
          case 1:
            body.insert(at, 1, static_cast<char>(pick(256)));
            break;
          case 2:
            body.erase(at, 1);
            break;
          default:
            body.resize(at);
            break;
        }
      }
      const auto res = post(body);
      ASSERT_TRUE(res);
      // Some edits leave valid JSON and a valid request; everything else is a 4xx.
      if (res->status != 200) {
        EXPECT_GE(res->status, 400);
        EXPECT_LT(res->status, 500) << body;
        expect_error(res, res->status);
      }
    } else if (kind == 1) {  // a field of the wrong type or value, or an extra field
      json body = speech("pcm");
      const std::vector<std::string> fields = {"model",         "input",        "voice",
                                               "speed",         "stream",       "response_format",
                                               "stream_format", "instructions", "extra"};
      body[fields[pick(fields.size())]] = odd_values[pick(odd_values.size())];
      const auto res = post(body.dump());
      ASSERT_TRUE(res);
      if (res->status != 200) expect_error(res, res->status);
      EXPECT_LT(res->status, 500);
    } else if (kind == 2) {  // wrong method or path
      const std::vector<std::string> paths = {
          "/index.html",          "/v1",  "/v1/audio/speech/", "/v1/audio/Speech",
          "/v1/audio/speech?x=1", "/%00", "/../etc/passwd"};
      const std::string path = paths[pick(paths.size())];
      const auto res = pick(2) ? get(path) : client().Delete(path.c_str(), auth());
      ASSERT_TRUE(res);
      EXPECT_GE(res->status, 400);
      EXPECT_LT(res->status, 500);
    } else if (kind == 3) {  // a broken Authorization header
      const std::vector<std::string> values = {"",
                                               "Bearer",
                                               "Basic abc",
                                               "bearer sk-test-key",
                                               std::string(2000, 'B'),
                                               "Bearer \xFF\xFE"};
      const auto res =
          post(valid, "/v1/audio/speech", {{"Authorization", values[pick(values.size())]}});
      expect_error(res, 401);
    } else {  // raw bytes: garbage, a broken request line, headers without an end
      std::string bytes;
      switch (pick(4)) {
        case 0:
          for (size_t k = 0, n = 1 + pick(300); k < n; ++k) bytes += static_cast<char>(pick(256));
          break;
        case 1:
          bytes = "POST /v1/audio/speech HTTP/1.1\r\nContent-Length: -5\r\n\r\n";
          break;
        case 2:
          bytes = "GET " + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n";
          break;
        default:
          bytes = "POST /v1/audio/speech HTTP/1.1\r\nContent-Length: 10\r\n\r\n{\"model\"";
          break;
      }
      const std::string reply = raw_exchange(api_->port(), bytes);
      // Either no reply at all or an HTTP 4xx.
      if (!reply.empty()) {
        EXPECT_TRUE(reply.starts_with("HTTP/1.1 4")) << reply.substr(0, 200);
      }
    }
  }
  for (int i = 0; i < 5; ++i) expect_server_healthy();
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.alive == 0; }));
  EXPECT_EQ(metrics_.render().find("code=\"5"), std::string::npos);
}

// A raw TCP client for the tests that must send exactly the bytes they choose, when they choose.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(connect_to(port)) {
    timeval timeout{5, 0};
    if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  ~RawClient() {
    if (fd_ >= 0) close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // False once the server has closed or reset the connection.
  bool send_all(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until `until` appears (or, when empty, until the server closes), at most 5 s of
  // silence.
  std::string read(const std::string& until = "") {
    while (until.empty() || received_.find(until) == std::string::npos) {
      const std::string piece = read_some(4096);
      if (piece.empty()) break;
      received_ += piece;
    }
    return received_;
  }
  // One read of at most `max` bytes (none once the server has closed, or after 5 s of silence).
  std::string read_some(size_t max) {
    std::string bytes(max, '\0');
    const ssize_t n = recv(fd_, bytes.data(), max, 0);
    if (n <= 0) closed_ = n == 0 || errno == ECONNRESET;
    bytes.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return bytes;
  }
  // Limits what the kernel buffers for this client's reads.
  void set_receive_buffer(int bytes) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  // How long a read waits in silence (5 s unless set).
  void set_receive_timeout(int seconds) {
    timeval timeout{seconds, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  }
  // Whether the server closed the connection (a read saw its end).
  bool closed() const { return closed_; }

 private:
  int fd_;
  std::string received_;
  bool closed_ = false;
};

// `count` raw clients that send `bytes` a byte at a time, each byte to all of them together and
// then a pause, from a thread of their own until all is sent or they go.
class Tricklers {
 public:
  Tricklers(int port, int count, std::string bytes, std::chrono::milliseconds pause)
      : bytes_(std::move(bytes)) {
    for (int i = 0; i < count; ++i) clients_.push_back(std::make_unique<RawClient>(port));
    thread_ = std::thread([this, pause] {
      for (size_t at = 0; at < bytes_.size() && !stop_.load(); ++at) {
        for (auto& client : clients_) client->send_all(bytes_.substr(at, 1));
        std::this_thread::sleep_for(pause);
      }
    });
  }
  ~Tricklers() {
    stop_.store(true);
    thread_.join();
  }
  Tricklers(const Tricklers&) = delete;
  Tricklers& operator=(const Tricklers&) = delete;

  bool connected() const {
    return std::all_of(clients_.begin(), clients_.end(),
                       [](const auto& client) { return client->connected(); });
  }
  const std::vector<std::unique_ptr<RawClient>>& clients() const { return clients_; }

 private:
  std::string bytes_;
  std::vector<std::unique_ptr<RawClient>> clients_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string authorized_get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + std::string(kKey) +
         "\r\n" + extra + "\r\n";
}

std::string speech_post(const std::string& body, const std::string& extra = "",
                        const std::string& version = "HTTP/1.1") {
  return "POST /v1/audio/speech " + version +
         "\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
         std::string(kKey) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra +
         "\r\n" + body;
}

// How many times `needle` occurs in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Slowloris: many clients trickling their headers a byte at a time neither hold the server up
// (a normal client is answered within a second) nor their connections for longer than the
// header deadline.
TEST_F(HttpApiTest, TricklingClientsAreCutOffAndOthersAreServed) {
  HttpConfig config = test_config();
  config.threads = 2;
  config.header_timeout_s = 1.5;
  start(config);
  const auto started = std::chrono::steady_clock::now();
  const Tricklers tricklers(api_->port(), 100, authorized_get("/healthz"), 100ms);
  ASSERT_TRUE(tricklers.connected());
  std::this_thread::sleep_for(300ms);
  const auto asked = std::chrono::steady_clock::now();
  const auto res = get("/healthz");
  const auto answered_in = std::chrono::steady_clock::now() - asked;
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(answered_in, 1s);
  // Each trickler is answered 408 and closed once its headers' deadline has passed.
  for (const auto& t : tricklers.clients()) {
    const std::string reply = t->read();
    EXPECT_TRUE(t->closed());
    if (!reply.empty()) {
      EXPECT_TRUE(reply.starts_with("HTTP/1.1 408")) << reply;
    }
  }
  const auto all_closed_after = std::chrono::steady_clock::now() - started;
  EXPECT_GE(all_closed_after, 1400ms);
  EXPECT_LT(all_closed_after, 10s);
  expect_server_healthy();
}

// Clients sending a header that never ends, a byte every millisecond, keep the connections'
// threads busy, so that a deadline often passes while a read's next step waits in the queue
// rather than on the socket. Each is still answered 408 at its deadline, long before its header
// would reach the size limit (which would answer 431).
TEST_F(HttpApiTest, BusyTricklersAreCutOffAtTheirDeadline) {
  HttpConfig config = test_config();
  config.threads = 2;
  config.header_timeout_s = 0.25;
  start(config);
  // 4096 header bytes at one a millisecond: ~4 s to the size limit.
  const Tricklers tricklers(api_->port(), 64,
                            "GET /healthz HTTP/1.1\r\nX-Pad: " + std::string(8192, 'a'), 1ms);
  ASSERT_TRUE(tricklers.connected());
  for (const auto& t : tricklers.clients()) {
    const std::string reply = t->read();
    EXPECT_TRUE(t->closed());
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 408")) << reply.substr(0, 200);
  }
  expect_server_healthy();
}

// A chunked body has no Content-Length to refuse it by: its size limit holds while it is read,
// and the client is answered 413 long before it has sent what it meant to.
TEST_F(HttpApiTest, AChunkedBodyOverTheLimitIsRefusedWhileItIsRead) {
  start();  // 64 KiB bodies
  RawClient client(api_->port());
  ASSERT_TRUE(
      client.send_all("POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                      std::string(kKey) + "\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string piece(16 << 10, ' ');
  size_t sent = 0;
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
  // Up to 100 MiB; the server must stop it long before.
  while (sent < (100u << 20) && client.send_all(size + piece + "\r\n")) sent += piece.size();
  const std::string reply = client.read();
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 413")) << reply.substr(0, 300);
  EXPECT_NE(reply.find("request_too_large"), std::string::npos);
  EXPECT_LT(sent, 32u << 20);  // the kernel's buffers take some before the close is seen
  expect_server_healthy();
}

// Without a key, a request is refused after its headers: the body is never read.
TEST_F(HttpApiTest, AnUnauthenticatedBodyIsNotRead) {
  start();
  RawClient client(api_->port());
  ASSERT_TRUE(client.send_all(
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string reply = client.read("}");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 401")) << reply;
  EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
}

TEST_F(HttpApiTest, AHeaderBlockOverTheLimitIsRefusedWhileItIsRead) {
  start();  // 4 KiB of headers
  RawClient client(api_->port());
  ASSERT_TRUE(client.send_all("GET /healthz HTTP/1.1\r\nHost: x\r\n"));
  size_t sent = 0;
  const std::string line = "X-Padding: " + std::string(1000, 'p') + "\r\n";
  while (sent < (100u << 20) && client.send_all(line)) sent += line.size();
  const std::string reply = client.read();
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 431")) << reply.substr(0, 300);
  EXPECT_LT(sent, 32u << 20);
  expect_server_healthy();
}

// RFC 9112's pipelining: requests sent back to back on one connection are answered in order.
TEST_F(HttpApiTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  RawClient client(api_->port());
  const std::string body = speech("pcm", false).dump();
  ASSERT_TRUE(client.send_all(authorized_get("/healthz") + speech_post(body) +
                              authorized_get("/nothing") + authorized_get("/v1/models")));
  const std::string replies = client.read("\"list\"}");
  const size_t ok = replies.find("HTTP/1.1 200");
  const size_t audio = replies.find("Content-Type: audio/pcm");
  const size_t missing = replies.find("HTTP/1.1 404");
  const size_t models = replies.find("\"list\"");
  EXPECT_EQ(count_of(replies, "HTTP/1.1 "), 4u) << replies.substr(0, 2000);
  EXPECT_LT(ok, audio);
  EXPECT_LT(audio, missing);
  EXPECT_LT(missing, models);
  EXPECT_NE(models, std::string::npos);
}

TEST_F(HttpApiTest, MalformedFramingIs400) {
  start();
  const std::vector<std::string> requests = {
      // Two different lengths: request smuggling's first step.
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: "
      "7\r\n\r\nhello",
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
      "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
  };
  for (const std::string& request : requests) {
    SCOPED_TRACE(request);
    RawClient client(api_->port());
    ASSERT_TRUE(client.send_all(request));
    const std::string reply = client.read();
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 400")) << reply;
    EXPECT_NE(reply.find("bad_request"), std::string::npos) << reply;
  }
  expect_server_healthy();
}

TEST_F(HttpApiTest, ExpectContinueGetsTheBodyRead) {
  start();
  RawClient client(api_->port());
  const std::string body = speech("pcm", false).dump();
  const std::string request = speech_post(body, "Expect: 100-continue\r\n");
  ASSERT_TRUE(client.send_all(request.substr(0, request.size() - body.size())));
  EXPECT_EQ(client.read("\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(client.send_all(body));
  const std::string reply = client.read("Content-Type: audio/pcm");
  EXPECT_NE(reply.find("HTTP/1.1 200"), std::string::npos) << reply.substr(0, 300);
}

// HTTP/1.0 has no chunked encoding: a streamed body ends where the connection does.
TEST_F(HttpApiTest, AnHttp10StreamEndsWithTheConnection) {
  start();
  RawClient client(api_->port());
  ASSERT_TRUE(client.send_all(speech_post(speech("pcm", true).dump(), "", "HTTP/1.0")));
  const std::string reply = client.read();
  EXPECT_TRUE(client.closed());
  const size_t body = reply.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  EXPECT_EQ(reply.find("chunked"), std::string::npos) << reply.substr(0, body);
  EXPECT_EQ(reply.size() - body - 4, 2u * kRate);
}

// A client that leaves while its whole file is being made cancels the work, counted as such.
TEST_F(HttpApiTest, AnAbandonedWholeFileRequestIsCancelled) {
  start();
  {
    RawClient client(api_->port());
    ASSERT_TRUE(client.send_all(speech_post(speech("wav", false, "gate").dump())));
    ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
  }
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.cancelled == 1; }));
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"cancelled\"} 1\n"));
  EXPECT_EQ(metrics_.render().find("outcome=\"ok\""), std::string::npos);
  expect_server_healthy();
}

// Requests the shutdown ends count as cancelled, whether streamed (cut off) or whole files
// (answered 503 shutting_down), and the shutdown keeps its grace while a client trickles bytes.
TEST_F(HttpApiTest, ShutdownKeepsItsGraceAndCountsWhatItEnds) {
  start();
  auto file =
      std::async(std::launch::async, [&] { return post(speech("wav", false, "gate").dump()); });
  auto stream =
      std::async(std::launch::async, [&] { return post(speech("pcm", true, "endless").dump()); });
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 2; }));
  ASSERT_TRUE(metrics_show("voxd_speech_time_to_first_audio_seconds_count 1\n"));  // the stream's
  RawClient trickler(api_->port());
  ASSERT_TRUE(trickler.send_all("GET /healthz HTTP/1.1\r\n"));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop.load() && trickler.send_all("X")) std::this_thread::sleep_for(50ms);
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(api_->shutdown(300ms), 2u);
  const auto took = std::chrono::steady_clock::now() - started;
  stop.store(true);
  trickle.join();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 5s);
  const auto file_res = file.get();
  ASSERT_TRUE(file_res);
  EXPECT_EQ(expect_error(file_res, 503)["code"], "shutting_down");
  const auto stream_res = stream.get();
  EXPECT_FALSE(stream_res) << stream_res->status << " "
                           << stream_res->body.substr(0, 300);  // cut off
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"cancelled\"} 2\n"));
}

// The connections over the limit are counted, and their 503 closes them without a Keep-Alive.
TEST_F(HttpApiTest, RejectedConnectionsAreCountedAndClosed) {
  HttpConfig config = test_config();
  config.max_connections = 2;
  start(config);
  RawClient first(api_->port());
  RawClient second(api_->port());
  ASSERT_TRUE(first.send_all(authorized_get("/healthz")));
  ASSERT_TRUE(second.send_all(authorized_get("/healthz")));
  first.read("}");
  second.read("}");
  for (int i = 0; i < 3; ++i) {
    RawClient over(api_->port());
    const std::string reply = over.read();
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 503")) << reply;
    EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
    EXPECT_EQ(reply.find("Keep-Alive"), std::string::npos) << reply;
    EXPECT_NE(reply.find("Retry-After: 1"), std::string::npos) << reply;
    EXPECT_TRUE(over.closed());
  }
  ASSERT_TRUE(first.send_all(authorized_get("/metrics")));
  const std::string page = first.read("voxd_speech_requests_in_progress 0");
  EXPECT_NE(page.find("voxd_http_connections_rejected_total 3\n"), std::string::npos) << page;
  EXPECT_NE(page.find("voxd_http_connections{state=\"active\"} 2\n"), std::string::npos);
}

// A client over the limit that is still sending its request when the 503 comes is not reset:
// what it sends is read and dropped, and it reads the 503 and the connection's end.
TEST_F(HttpApiTest, ARejectedClientSendingItsBodyReadsThe503) {
  HttpConfig config = test_config();
  config.max_connections = 1;
  start(config);
  RawClient holder(api_->port());
  ASSERT_TRUE(holder.send_all(authorized_get("/healthz")));
  holder.read("}");
  RawClient over(api_->port());
  ASSERT_TRUE(over.send_all(
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(over.send_all(std::string(10 << 10, ' '))) << "reset after " << i << " pieces";
    std::this_thread::sleep_for(5ms);
  }
  const std::string reply = over.read();
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 503")) << reply;
  EXPECT_TRUE(over.closed());
}

// Clients over the limit that never read their 503 hold up no one else's: 150 more are each
// answered at once.
TEST_F(HttpApiTest, SlowRejectedClientsDelayNoOtherRejection) {
  HttpConfig config = test_config();
  config.max_connections = 1;
  start(config);
  RawClient holder(api_->port());
  ASSERT_TRUE(holder.send_all(authorized_get("/healthz")));
  holder.read("}");
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 7; ++i) silent.push_back(std::make_unique<RawClient>(api_->port()));
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 150; ++i) {
    RawClient over(api_->port());
    EXPECT_TRUE(over.read().starts_with("HTTP/1.1 503")) << i;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
}

// A client reading a large file slowly but steadily gets all of it: the write deadline is for
// each part of the response the client takes, not for the whole.
TEST_F(HttpApiTest, ASlowSteadyReaderGetsAWholeLargeFile) {
  HttpConfig config = test_config();
  config.write_timeout_s = 1;
  start(config);
  RawClient client(api_->port());
  client.set_receive_buffer(16 << 10);
  client.set_receive_timeout(60);  // the whole file is made before its first byte is sent
  ASSERT_TRUE(client.send_all(speech_post(speech("pcm", false, "long").dump())));
  const size_t body_bytes = 2 * kLongSeconds * kRate;
  std::string reply;
  size_t header_end = std::string::npos;
  // ~4 MB/s: the whole body takes several times the deadline to read.
  while (header_end == std::string::npos || reply.size() < header_end + 4 + body_bytes) {
    const std::string piece = client.read_some(16 << 10);
    if (piece.empty()) break;
    reply += piece;
    if (header_end == std::string::npos) header_end = reply.find("\r\n\r\n");
    std::this_thread::sleep_for(4ms);
  }
  ASSERT_NE(header_end, std::string::npos) << reply.substr(0, 200);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply.substr(0, 200);
  EXPECT_EQ(reply.size() - header_end - 4, body_bytes);
  EXPECT_FALSE(client.closed());
}

// A reply waiting for its audio while pipelined requests fill the connection's read buffer is
// still answered: nothing is read until it is, and the connection stays.
TEST_F(HttpApiTest, AReplyWaitingBehindAFullReadBufferIsAnswered) {
  start();
  RawClient client(api_->port());
  ASSERT_TRUE(client.send_all(speech_post(speech("pcm", true, "gate").dump())));
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
  // More than the buffer's 4 KiB of headers and 64 KiB of slack.
  std::string pipelined;
  while (pipelined.size() < (96u << 10)) pipelined += authorized_get("/healthz");
  ASSERT_TRUE(client.send_all(pipelined));
  std::this_thread::sleep_for(200ms);
  service_.log.update([&] { service_.log.gate_open = true; });
  const std::string reply = client.read("0\r\n\r\n");
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply.substr(0, 200);
  EXPECT_NE(reply.find("0\r\n\r\n"), std::string::npos);
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.alive == 0; }));
  EXPECT_TRUE(service_.log.wait_for([&] { return service_.log.cancelled == 0; }));
}

// Two threads serve a thousand open connections, and each still answers.
TEST_F(HttpApiTest, AFewThreadsServeAThousandConnections) {
  HttpConfig config = test_config();
  config.threads = 2;
  config.keep_alive_timeout_s = 60;
  start(config);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 1000; ++i) {
    clients.push_back(std::make_unique<RawClient>(api_->port()));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  for (auto& c : clients) ASSERT_TRUE(c->send_all(authorized_get("/healthz")));
  for (auto& c : clients) EXPECT_NE(c->read("}").find("HTTP/1.1 200"), std::string::npos);
  const auto res = get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("voxd_http_connections{state=\"active\"} 1001\n"), std::string::npos);
  expect_server_healthy();
}

// The descriptor table is grown for max_connections when the server starts, not one doubling at
// a time under a burst of accepts (server/descriptor_table.h).
TEST_F(HttpApiTest, StartingGrowsTheDescriptorTableForItsConnections) {
  HttpConfig config = test_config();
  config.max_connections = 3000;
  start(config);
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_GE(descriptor_table_size(), static_cast<int>(std::min<rlim_t>(3000, limit.rlim_cur)));
}

// The service's own metrics are bound when the API is made, before any scrape.
TEST_F(HttpApiTest, ServiceMetricsAreBoundBeforeTheFirstScrape) {
  start();
  EXPECT_NE(metrics_.render().find("voxd_fake_steps_total 0"), std::string::npos);
}

// OpenAI's clients take pcm as 24 kHz: voxd resamples to it unless asked for the voice's rate,
// and says the rate in X-Sample-Rate either way.
TEST_F(HttpApiTest, PcmIsAt24kHzUnlessTheNativeRateIsAsked) {
  start();
  json body = speech("pcm", false);
  body.erase("sample_rate");
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("X-Sample-Rate"), "24000");
  EXPECT_EQ(res->body.size(), 2u * 24000);
  const auto native = post(speech("pcm", false).dump());
  ASSERT_TRUE(native);
  EXPECT_EQ(native->get_header_value("X-Sample-Rate"), std::to_string(kRate));
}

// stream_format "sse": OpenAI's events, the audio base64 in speech.audio.delta, then
// speech.audio.done with the usage; the audio decodes to what the plain stream carries.
TEST_F(HttpApiTest, ServerSentEventsCarryTheAudioAndTheUsage) {
  start();
  json body = speech("pcm", true);
  body["stream_format"] = "sse";
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::string audio;
  json done;
  size_t deltas = 0;
  for (size_t at = 0; at < res->body.size();) {
    const size_t end = res->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << "an event without its blank line";
    const std::string event = res->body.substr(at, end - at);
    ASSERT_TRUE(event.starts_with("data: ")) << event;
    const json data = json::parse(event.substr(6));
    if (data["type"] == "speech.audio.delta") {
      ++deltas;
      audio += test::base64_decode(data["audio"].get<std::string>());
    } else {
      EXPECT_EQ(data["type"], "speech.audio.done");
      done = data;
    }
    at = end + 2;
  }
  EXPECT_GT(deltas, 1u);
  ASSERT_TRUE(done.is_object());
  EXPECT_EQ(done["usage"]["input_tokens"], 6);    // "Hello."
  EXPECT_EQ(done["usage"]["output_tokens"], 50);  // one second, 20 ms a token
  const test::Decoded d = test::decode(audio, true, kRate);
  EXPECT_EQ(d.shorts, expected_sine(kRate));
}

// A failure after the first event ends the event stream with an error event.
TEST_F(HttpApiTest, AFailureInAnEventStreamIsAnErrorEvent) {
  start();
  json body = speech("pcm", true, "fail");
  body["stream_format"] = "sse";
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const size_t last = res->body.rfind("data: ");
  ASSERT_NE(last, std::string::npos);
  const json event = json::parse(res->body.substr(last + 6));
  EXPECT_EQ(event["type"], "error");
  EXPECT_EQ(event["error"]["type"], "server_error");
}

// Speech requests refused before they are read whole count in voxd_speech_requests_total too.
TEST_F(HttpApiTest, RefusedSpeechRequestsAreCounted) {
  start();
  expect_error(post(speech().dump(), "/v1/audio/speech", {}), 401);
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"client_error\"} 1\n"));
  expect_error(post(std::string(100 << 10, ' ')), 413);
  EXPECT_TRUE(metrics_show("voxd_speech_requests_total{outcome=\"client_error\"} 2\n"));
}

TEST_F(HttpApiTest, ModelsAreRetrievedById) {
  start();
  const auto res = get("/v1/models/tts-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["id"], "tts-1");
  EXPECT_EQ(expect_error(get("/v1/models/tts-9"), 404)["code"], "model_not_found");
  expect_error(get("/v1/models/tts-1", {}), 401);
}

TEST_F(HttpApiTest, InstructionsAreAcceptedAndSaidToBeIgnored) {
  start();
  json body = speech("wav", false);
  body["instructions"] = "Speak cheerfully.";
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("X-Ignored-Fields"), "instructions");
  const auto plain = post(speech("wav", false).dump());
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->has_header("X-Ignored-Fields"));
}

TEST_F(HttpApiTest, VoiceAliasesNameServedVoices) {
  HttpConfig config = test_config();
  config.voice_aliases = {{"nova", "en-demo"}};
  start(config);
  json body = speech("pcm", false);
  body["voice"] = "nova";
  const auto res = post(body.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->body.size(), 2u * kRate);
}

}  // namespace
}  // namespace voxd::server
