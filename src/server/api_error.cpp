#include "server/api_error.h"

#include <utility>

namespace voxd::server {

nlohmann::json ApiError::body() const {
  nlohmann::json error = {
      {"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (param) error["param"] = *param;
  if (code) error["code"] = *code;
  return {{"error", std::move(error)}};
}

ApiError ApiError::invalid_request(std::string message, std::optional<std::string> param,
                                   std::optional<std::string> code) {
  ApiError error;
  error.status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  error.code = std::move(code);
  return error;
}

}  // namespace voxd::server
