// HttpApi against a real server on 127.0.0.1 (a free port) with a fake SpeechService that
// speaks a sine wave: bad input, authentication, wrong paths and methods, limits, streamed and
// whole-file audio that decodes, a client leaving mid-stream, overload at the connection limit,
// CORS, the JSON endpoints, and 200 random malformed requests followed by valid ones. Waits for
// events have generous bounds and pass as soon as the event happens.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
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
#include "server/http_api.h"

namespace voxd::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int64_t kRate = 22050;
constexpr auto kEventTimeout = 60s;  // how long a test waits for something that should happen
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

// Speaks a 440 Hz sine. The input chooses how: "endless" produces until cancelled (at most ten
// minutes), "gate" waits for JobLog::gate_open first (or for the client to leave), "fail"
// throws after some audio; anything else gives one second.
class FakeJob final : public SpeechJob {
 public:
  FakeJob(std::string input, JobLog& log) : input_(std::move(input)), log_(log) {
    log_.update([&] { ++log_.alive; });
  }
  ~FakeJob() override {
    log_.update([&] { --log_.alive; });
  }

  int64_t sample_rate() const override { return kRate; }

  void run(SpeechSink& sink, const CancelToken& cancel) override {
    log_.update([&] { ++log_.running; });
    if (input_ == "gate") {
      // Waits as a queued request does, looking at the connection now and then.
      std::unique_lock lock(log_.mutex);
      while (!log_.changed.wait_for(lock, 5ms, [&] { return log_.gate_open; })) {
        lock.unlock();
        const bool connected = sink.connected();
        lock.lock();
        if (!connected) break;
      }
    }
    const int64_t total = input_ == "endless" ? 600 * kRate : kRate;
    std::vector<float> chunk;
    for (int64_t start = 0; start < total; start += 2205) {
      if (cancel.cancelled()) break;
      if (input_ == "fail" && start > kRate / 2) throw std::runtime_error("the fake vocoder broke");
      chunk.clear();
      for (int64_t i = start; i < std::min(total, start + 2205); ++i) chunk.push_back(sine(i));
      if (!sink.write(chunk)) break;
    }
    if (cancel.cancelled()) log_.update([&] { ++log_.cancelled; });
    log_.update([&] { --log_.running; });
  }

 private:
  std::string input_;
  JobLog& log_;
};

class FakeService final : public SpeechService {
 public:
  std::vector<std::string> models() const override { return {"tts-1", "voxd"}; }
  std::vector<VoiceInfo> voices() const override {
    return {{"en-demo", kRate, "en"}, {"alloy", kRate, "en"}};
  }
  Readiness readiness() const override {
    std::lock_guard lock(mutex_);
    return readiness_;
  }
  std::string memory_summary_text() const override { return "fake memory summary\n"; }
  json memory_summary_json() const override { return {{"device", "cpu"}}; }
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

  static json speech(const std::string& format = "wav", bool stream = true,
                     const std::string& input = "Hello.") {
    return {{"model", "tts-1"},
            {"input", input},
            {"voice", "en-demo"},
            {"response_format", format},
            {"stream", stream}};
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
  unknown["temperature"] = 1;
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
  for (const char* path : {"/v1/models", "/v1/voices", "/readyz", "/metrics", "/debug/memory"}) {
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
  config.max_waiting_connections = 0;
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
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
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
  ASSERT_TRUE(service_.log.wait_for([&] { return service_.log.running == 1; }));
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
                            "language": "en"})"));

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
  expect_error(client().Options("/v1/audio/speech", {{"Origin", "https://evil.example"}}), 403);
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
          "/",    "/v1",           "/v1/audio/speech/", "/v1/audio/Speech", "/v1/audio/speech?x=1",
          "/%00", "/../etc/passwd"};
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

}  // namespace
}  // namespace voxd::server
