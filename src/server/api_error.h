// An error answered to an HTTP client: a status code and OpenAI's error object,
// {"error": {"message", "type", "param", "code"}}. Thrown by request parsing and by the speech
// service; the HTTP layer turns it into the response.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace voxd::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;  // the request field at fault, when there is one
  std::optional<std::string> code;   // a stable machine-readable reason, e.g. "input_too_long"
  // Seconds a client should wait before retrying (sent as Retry-After); for 503 and 429.
  std::optional<int> retry_after_s;

  // {"error": {"message": ..., "type": ..., "param": ... or null, "code": ... or null}}.
  nlohmann::json body() const;

  // A 400 invalid_request_error about `param` (or about no field when empty).
  static ApiError invalid_request(std::string message, std::optional<std::string> param = {},
                                  std::optional<std::string> code = {});
};

}  // namespace voxd::server
