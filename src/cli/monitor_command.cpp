#include "cli/monitor_command.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cli/finite_number.h"
#include "core/error.h"
#include "core/memory_summary.h"
#include "server/prometheus_text.h"

namespace voxd {
namespace {

using nlohmann::json;
using server::Buckets;
using server::Scrape;
using Clock = std::chrono::steady_clock;

struct MonitorOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  double interval_s = 1.0;
  bool once = false;
};

// What one look at the server saw.
struct Reading {
  Clock::time_point time;
  json memory;
  Scrape metrics;
};

// GET requests to one http://host:port server, a connection each, with timeouts.
class HttpClient {
 public:
  // Throws InputError unless `url` is http://host or http://host:port (a trailing / is fine).
  explicit HttpClient(const std::string& url) {
    constexpr std::string_view kScheme = "http://";
    std::string rest = url.starts_with(kScheme) ? url.substr(kScheme.size()) : "";
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
    port_ = colon == std::string::npos ? "80" : rest.substr(colon + 1);
    const bool port_ok =
        !port_.empty() && port_.size() <= 5 && std::all_of(port_.begin(), port_.end(), ::isdigit);
    if (host_.empty() || rest.find('/') != std::string::npos || !port_ok) {
      throw InputError("--url " + url + " is not an http://host:port address");
    }
  }

  struct Response {
    int status = 0;
    std::string body;
  };

  // GET `path` with `bearer` as the API key (none when empty). Throws Error naming the reason
  // when the server cannot be reached or does not answer within 10 s.
  Response get(const std::string& path, const std::string& bearer) const {
    namespace net = boost::asio;
    namespace beast = boost::beast;
    namespace http = beast::http;
    net::io_context io;
    net::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    beast::flat_buffer buffer;
    http::request<http::empty_body> request{http::verb::get, path, 11};
    request.set(http::field::host, host_);
    request.set(http::field::connection, "close");
    if (!bearer.empty()) request.set(http::field::authorization, "Bearer " + bearer);
    http::response<http::string_body> response;
    beast::error_code failure;
    resolver.async_resolve(host_, port_, [&](beast::error_code ec, const auto& endpoints) {
      if (ec) {
        failure = ec;
        return;
      }
      stream.expires_after(std::chrono::seconds(10));
      stream.async_connect(endpoints, [&](beast::error_code connect_ec, const auto&) {
        if (connect_ec) {
          failure = connect_ec;
          return;
        }
        http::async_write(stream, request, [&](beast::error_code write_ec, size_t) {
          if (write_ec) {
            failure = write_ec;
            return;
          }
          http::async_read(stream, buffer, response,
                           [&](beast::error_code read_ec, size_t) { failure = read_ec; });
        });
      });
    });
    io.run();
    if (failure)
      throw Error("cannot reach http://" + host_ + ":" + port_ + path + ": " + failure.message());
    return {static_cast<int>(response.result_int()), std::move(response.body())};
  }

 private:
  std::string host_;
  std::string port_;
};

class Server {
 public:
  explicit Server(const MonitorOptions& options) : options_(options), client_(options.url) {}

  Reading read() {
    Reading reading;
    reading.time = Clock::now();
    reading.memory = json::parse(get("/debug/memory?format=json"), nullptr, false);
    if (reading.memory.is_discarded() || !reading.memory.is_object()) {
      throw Error(options_.url + "/debug/memory?format=json did not answer a JSON object");
    }
    reading.metrics = server::parse_prometheus_text(get("/metrics"));
    return reading;
  }

 private:
  std::string get(const std::string& path) {
    const HttpClient::Response res = client_.get(path, options_.api_key);
    if (res.status != 200) {
      std::string message = res.body;
      const json body = json::parse(res.body, nullptr, false);
      if (body.is_object() && body.contains("error") && body["error"].contains("message")) {
        message = body["error"]["message"].get<std::string>();
      }
      throw Error(options_.url + path + " answered " + std::to_string(res.status) + ": " + message +
                  (res.status == 401 ? " (give the key with --api-key)" : ""));
    }
    return res.body;
  }

  const MonitorOptions& options_;
  HttpClient client_;
};

std::string bytes_of(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number()) return "-";
  return format_bytes(object[key].get<uint64_t>());
}

std::string fixed(std::optional<double> value, int decimals, const std::string& unit = "") {
  if (!value || !std::isfinite(*value)) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, *value);
  return text + unit;
}

// The step kinds the server has run, by the "kind" label of its batch sizes, in order of name.
std::set<std::string> step_kinds(const Scrape& metrics) {
  std::set<std::string> kinds;
  for (const server::Sample& sample : metrics.samples) {
    if (sample.name != "voxd_engine_batch_size_count") continue;
    for (const auto& [key, value] : sample.labels) {
      if (key == "kind") kinds.insert(value);
    }
  }
  return kinds;
}

std::optional<double> per_second(const Reading& now, const Reading* before, const std::string& name,
                                 const server::Labels& match = {}) {
  if (before == nullptr) return std::nullopt;
  const auto a = now.metrics.sum(name, match);
  const auto b = before->metrics.sum(name, match);
  const double seconds = std::chrono::duration<double>(now.time - before->time).count();
  if (!a || seconds <= 0) return std::nullopt;
  const double delta = *a - b.value_or(0.0);
  return delta >= 0 ? delta / seconds : *a / seconds;
}

// A histogram's observations since `before` when there were any, else all of them; `recent` says
// which.
std::optional<Buckets> window(const Reading& now, const Reading* before, const std::string& name,
                              const server::Labels& match, bool& recent) {
  const auto all = now.metrics.histogram(name, match);
  recent = false;
  if (!all) return std::nullopt;
  if (before != nullptr) {
    if (const auto earlier = before->metrics.histogram(name, match)) {
      const Buckets delta = server::buckets_since(*all, *earlier);
      if (delta.count > 0) {
        recent = true;
        return delta;
      }
    }
  }
  return all;
}

std::string quantiles(const std::optional<Buckets>& buckets, double scale, int decimals,
                      const std::string& unit) {
  if (!buckets || buckets->count <= 0) return "-";
  const auto scaled = [&](double q) {
    const auto v = server::histogram_quantile(q, *buckets);
    return fixed(v ? std::optional<double>(*v * scale) : std::nullopt, decimals, unit);
  };
  return "p50 " + scaled(0.5) + "  p95 " + scaled(0.95);
}

std::string mean(const std::optional<Buckets>& buckets) {
  if (!buckets || buckets->count <= 0) return "-";
  return fixed(buckets->sum / buckets->count, 1);
}

std::string local_time() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

std::string frame(const MonitorOptions& options, const Reading& now, const Reading* before) {
  std::ostringstream out;
  const json& memory = now.memory;
  const json breakdown = memory.value("breakdown", json::object());
  const json stats = memory.value("stats", json::object());
  const Scrape& m = now.metrics;
  out << "voxd monitor  " << options.url << "  " << local_time() << "  (every "
      << fixed(options.interval_s, 1) << " s)\n\n";
  out << "device      " << memory.value("device", std::string("?")) << "   voices loaded "
      << fixed(m.sum("voxd_engine_voices_loaded"), 0) << "\n";
  out << "memory      weights " << bytes_of(breakdown, "weights") << "   workspace "
      << bytes_of(breakdown, "workspace") << "   cache " << bytes_of(breakdown, "cached")
      << "   free " << bytes_of(breakdown, "free") << "   total " << bytes_of(breakdown, "total")
      << "\n";
  out << "allocator   allocated " << bytes_of(stats, "allocated_bytes") << " (peak "
      << bytes_of(stats, "peak_allocated_bytes") << ")   reserved "
      << bytes_of(stats, "reserved_bytes") << " (peak " << bytes_of(stats, "peak_reserved_bytes")
      << ")\n";
  const json reading = memory.value("device_reading", json());
  if (reading.is_object() && reading.value("available", false)) {
    out << "GPU         " << reading.value("name", std::string("?")) << "   used "
        << bytes_of(reading, "used_bytes") << " of " << bytes_of(reading, "total_bytes");
    if (reading.contains("gpu_utilization") && reading["gpu_utilization"].is_number()) {
      out << "   utilisation " << reading["gpu_utilization"].get<int>() << " %";
    }
    out << "   (" << reading.value("source", std::string("NVML")) << ")\n";
  } else if (reading.is_object()) {
    out << "GPU         no reading: " << reading.value("reason", std::string("-")) << "\n";
  }
  const auto leak = m.sum("voxd_memory_leak_bytes");
  if (leak && *leak > 0) {
    out << "LEAK        " << format_bytes(static_cast<uint64_t>(*leak))
        << " allocated while idle (see the server log)\n";
  }
  out << "\n";
  out << "requests/s  " << fixed(per_second(now, before, "voxd_speech_requests_total"), 1)
      << "   ok " << fixed(m.sum("voxd_speech_requests_total", {{"outcome", "ok"}}).value_or(0), 0)
      << "   rejected "
      << fixed(m.sum("voxd_speech_requests_total", {{"outcome", "rejected"}}).value_or(0), 0)
      << "   cancelled "
      << fixed(m.sum("voxd_speech_requests_total", {{"outcome", "cancelled"}}).value_or(0), 0)
      << "   failed "
      << fixed(m.sum("voxd_speech_requests_total", {{"outcome", "failed"}}).value_or(0), 0)
      << "   client errors "
      << fixed(m.sum("voxd_speech_requests_total", {{"outcome", "client_error"}}).value_or(0), 0)
      << "\n";
  out << "streams     active " << fixed(m.sum("voxd_engine_active_streams"), 0) << "   in progress "
      << fixed(m.sum("voxd_speech_requests_in_progress"), 0) << "   queue depth "
      << fixed(m.sum("voxd_engine_queue_depth"), 0) << "   connections "
      << fixed(m.sum("voxd_http_connections", {{"state", "active"}}), 0) << "\n";
  if (const double pages = m.sum("voxd_engine_kv_cache_pages", {{"state", "total"}}).value_or(0);
      pages > 0) {
    out << "kv cache    pages used "
        << fixed(m.sum("voxd_engine_kv_cache_pages", {{"state", "used"}}), 0) << " of "
        << fixed(pages, 0) << "   streams holding "
        << fixed(m.sum("voxd_engine_kv_cache_streams"), 0) << " (most "
        << fixed(m.sum("voxd_engine_kv_cache_most_pages_per_stream"), 0) << ")   preemptions "
        << fixed(m.sum("voxd_engine_preemptions_total").value_or(0), 0) << "   decode "
        << fixed(per_second(now, before, "voxd_engine_batch_size_sum", {{"kind", "decode"}}), 0)
        << " tokens/s\n";
  }
  out << "audio       " << fixed(per_second(now, before, "voxd_speech_audio_seconds_total"), 2)
      << " s of audio per s   total " << fixed(m.sum("voxd_speech_audio_seconds_total"), 1)
      << " s\n";
  bool recent = false;
  out << "batch size ";
  const char* separator = " ";
  for (const std::string& kind : step_kinds(now.metrics)) {
    out << separator << kind << " mean "
        << mean(window(now, before, "voxd_engine_batch_size", {{"kind", kind}}, recent));
    separator = "   ";
  }
  out << "\n";
  const auto ttfa = window(now, before, "voxd_speech_time_to_first_audio_seconds", {}, recent);
  out << "TTFA        " << quantiles(ttfa, 1000.0, 0, " ms")
      << (recent ? "   (last interval)" : "   (all time)") << "\n";
  const auto rtf = window(now, before, "voxd_engine_real_time_factor", {}, recent);
  out << "RTF         " << quantiles(rtf, 1.0, 3, "")
      << (recent ? "   (last interval)" : "   (all time)") << "\n";
  return out.str();
}

int run_monitor(const MonitorOptions& options) {
  Server server(options);
  const auto interval = std::chrono::duration<double>(options.interval_s);
  std::optional<Reading> before;
  // Rates need two readings: the first frame comes one interval after the first look.
  before = server.read();
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  for (;;) {
    std::this_thread::sleep_for(interval);
    Reading now = server.read();
    const std::string text = frame(options, now, &*before);
    if (terminal && !options.once) std::cout << "\x1b[H\x1b[2J";  // home, clear
    std::cout << text << std::flush;
    if (options.once) return 0;
    before = std::move(now);
  }
}

}  // namespace

void add_monitor_command(CLI::App& app) {
  auto options = std::make_shared<MonitorOptions>();
  CLI::App* cmd = app.add_subcommand(
      "monitor", "Watch a running voxd serve: memory by kind and load, refreshed every second");
  cmd->add_option("--url", options->url, "The server's address")
      ->envname("VOXD_URL")
      ->capture_default_str();
  cmd->add_option("--api-key", options->api_key, "Bearer token, when the server requires one")
      ->envname("VOXD_API_KEY");
  cmd->add_option("--interval", options->interval_s, "Seconds between frames")
      ->capture_default_str()
      ->check(finite_number())
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_flag("--once", options->once, "Print one frame (after one interval) and exit");
  cmd->callback([options] {
    int code = 0;
    try {
      code = run_monitor(*options);
    } catch (const std::exception& e) {
      std::cerr << "voxd: error: " << e.what() << "\n";
      code = 1;
    }
    std::cout.flush();
    std::exit(code);
  });
}

}  // namespace voxd
