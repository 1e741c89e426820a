#include "core/config_fields.h"

#include <cmath>

#include "core/error.h"

namespace voxd::config {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& key, const std::string& what) {
  throw InputError(where + ": field '" + key + "' must be " + what);
}

}  // namespace

const json& require(const json& object, const std::string& key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) {
    throw InputError(where + ": missing field '" + key + "'");
  }
  return object.at(key);
}

int64_t positive_int(const json& object, const std::string& key, const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_number_integer() || value.get<int64_t>() < 1)
    bad(where, key, "a whole number >= 1");
  return value.get<int64_t>();
}

int64_t non_negative_int(const json& object, const std::string& key, const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_number_integer() || value.get<int64_t>() < 0)
    bad(where, key, "a whole number >= 0");
  return value.get<int64_t>();
}

double number(const json& object, const std::string& key, const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_number() || !std::isfinite(value.get<double>())) bad(where, key, "a number");
  return value.get<double>();
}

double positive_number(const json& object, const std::string& key, const std::string& where) {
  const double value = number(object, key, where);
  if (!(value > 0.0)) bad(where, key, "a number > 0");
  return value;
}

std::string string(const json& object, const std::string& key, const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_string()) bad(where, key, "a string");
  return value.get<std::string>();
}

std::vector<int64_t> positive_int_list(const json& object, const std::string& key,
                                       const std::string& where) {
  const json& value = require(object, key, where);
  if (!value.is_array() || value.empty()) bad(where, key, "a list of whole numbers >= 1");
  std::vector<int64_t> out;
  for (const json& item : value) {
    if (!item.is_number_integer() || item.get<int64_t>() < 1) {
      bad(where, key, "a list of whole numbers >= 1");
    }
    out.push_back(item.get<int64_t>());
  }
  return out;
}

}  // namespace voxd::config
