// Reading fields of a JSON config with errors a user can act on: "<where>: field '<key>' must
// be ..." naming the file (or the section) and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace voxd::config {

// object[key]; InputError when `object` is not an object or has no `key`.
const nlohmann::json& require(const nlohmann::json& object, const std::string& key,
                              const std::string& where);
// A whole number ≥ 1.
int64_t positive_int(const nlohmann::json& object, const std::string& key,
                     const std::string& where);
// A whole number ≥ 0.
int64_t non_negative_int(const nlohmann::json& object, const std::string& key,
                         const std::string& where);
// A finite number > 0.
double positive_number(const nlohmann::json& object, const std::string& key,
                       const std::string& where);
// A finite number.
double number(const nlohmann::json& object, const std::string& key, const std::string& where);
std::string string(const nlohmann::json& object, const std::string& key, const std::string& where);
// A list of whole numbers ≥ 1 (at least one).
std::vector<int64_t> positive_int_list(const nlohmann::json& object, const std::string& key,
                                       const std::string& where);

}  // namespace voxd::config
